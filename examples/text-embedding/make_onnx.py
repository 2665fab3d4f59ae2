#!/usr/bin/env python3
"""Writes a sentence-embedding ONNX graph from a Hugging Face BERT-family folder
(`config.json` + `model.safetensors`, e.g. sentence-transformers/all-MiniLM-L6-v2), with
only `numpy` and `onnx`: no torch, no transformers, no safetensors package (the file is
an 8-byte little-endian header length, a JSON header, then raw little-endian data).

    python make_onnx.py SRC_DIR OUT.onnx

scripts/minilm.sh runs it (pinned numpy and onnx: examples/text-embedding/requirements.txt).
The graph is what sentence-transformers computes for Transformer + Pooling(mean) +
Normalize, for single sentences:

    input_ids:      INT64 [N, L]   word-piece ids, [CLS] ... [SEP], padded with anything
    attention_mask: INT64 [N, L]   1 for a real token, 0 for padding
    embedding:      FP32  [N, H]   mean of the last hidden state over the mask, L2-normalised

- token_type_ids are all 0 for a single sentence, so the token-type embedding's row 0 is
  added to the position table here (one constant) and there is no third input;
- positions are 0..L-1: the position table is sliced to L rows (Shape -> Slice), so L may
  be at most max_position_embeddings;
- padding is masked as Hugging Face's BERT does it: (1 - mask) * float32 min added to the
  attention scores, so a padded key gets exactly zero softmax weight, and an item padded
  with extra mask-0 tokens gets the embedding it gets alone (up to float rounding);
- GELU is the erf one (config `hidden_act: "gelu"`), LayerNorm uses the config's
  `layer_norm_eps`; both are written out in plain ops, in the shapes ONNX Runtime's
  optimiser fuses back into LayerNormalization and BiasGelu (Pow(x, 2), not x * x;
  Div by sqrt 2, not Mul by its inverse);
- opset 17, standard ops only, FP32 weights stored inside the file (no external data): the
  host analyses the graph with tract-onnx 0.21 before running it with ONNX Runtime, so
  every reshape uses constant 0/-1 dims and the only shape computation is L.
"""

import json
import pathlib
import struct
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
# safetensors dtypes this reads; BF16 is widened by hand (numpy has no bfloat16).
DTYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I64": "<i8", "I32": "<i4", "BF16": "<u2"}


def read_safetensors(path):
    """{name: numpy array} of a .safetensors file, float tensors as float32."""
    data = pathlib.Path(path).read_bytes()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len])
    body = memoryview(data)[8 + header_len :]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = info["dtype"]
        if dtype not in DTYPES:
            raise SystemExit(f"{path}: tensor {name} has dtype {dtype}, which this script does not read")
        start, end = info["data_offsets"]
        array = np.frombuffer(body[start:end], dtype=DTYPES[dtype]).reshape(info["shape"])
        if dtype == "BF16":
            array = (array.astype(np.uint32) << 16).view(np.float32)
        elif array.dtype.kind == "f":
            array = array.astype(np.float32)
        tensors[name] = array
    return tensors


class Graph:
    """Nodes and initializers; each node's output value is named as the node."""

    def __init__(self):
        self.nodes = []
        self.initializers = []

    def const(self, name, array):
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def op(self, op_type, inputs, name, **attributes):
        self.nodes.append(helper.make_node(op_type, inputs, [name], name=name, **attributes))
        return name


def build(config, weights):
    hidden = config["hidden_size"]
    heads = config["num_attention_heads"]
    head_dim = hidden // heads
    eps = float(config.get("layer_norm_eps", 1e-12))
    if config.get("hidden_act", "gelu") != "gelu":
        raise SystemExit(f"hidden_act {config['hidden_act']!r}: only the erf GELU ('gelu') is written")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise SystemExit("only absolute position embeddings are written")
    if hidden % heads:
        raise SystemExit(f"hidden_size {hidden} is not a multiple of num_attention_heads {heads}")

    # Hugging Face names BertModel's tensors with or without a "bert." prefix.
    prefix = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""

    def w(name):
        try:
            return weights[prefix + name]
        except KeyError:
            raise SystemExit(f"model.safetensors has no tensor {prefix + name}") from None

    g = Graph()
    f32 = lambda x: np.asarray(x, dtype=np.float32)  # noqa: E731
    i64 = lambda x: np.asarray(x, dtype=np.int64)  # noqa: E731

    # Shared constants.
    g.const("axes_last", i64([-1]))  # for Unsqueeze / ReduceSum (inputs since opset 13)
    g.const("axes_1", i64([1]))
    g.const("axes_1_2", i64([1, 2]))
    g.const("one", f32(1.0))
    g.const("half", f32(0.5))
    g.const("sqrt2", f32(np.sqrt(2.0)))
    g.const("two", f32(2.0))
    g.const("mask_min", f32(np.finfo(np.float32).min))
    g.const("eps_count", f32(1e-9))
    g.const("eps_norm", f32(1e-12))
    g.const("ln_eps", f32(eps))
    g.const("score_scale", f32(1.0 / np.sqrt(head_dim)))
    g.const("shape_heads", i64([0, 0, heads, head_dim]))
    g.const("shape_hidden", i64([0, 0, hidden]))
    g.const("zero_1d", i64([0]))
    g.const("one_1d", i64([1]))
    g.const("two_1d", i64([2]))

    def layer_norm(x, name, gamma, beta):
        mean = g.op("ReduceMean", [x], f"{name}.mean", axes=[-1], keepdims=1)
        d = g.op("Sub", [x, mean], f"{name}.centered")
        var = g.op("ReduceMean", [g.op("Pow", [d, "two"], f"{name}.square")], f"{name}.var", axes=[-1], keepdims=1)
        std = g.op("Sqrt", [g.op("Add", [var, "ln_eps"], f"{name}.var_eps")], f"{name}.std")
        y = g.op("Div", [d, std], f"{name}.normed")
        y = g.op("Mul", [y, g.const(f"{name}.weight", gamma)], f"{name}.scaled")
        return g.op("Add", [y, g.const(f"{name}.bias", beta)], f"{name}.out")

    def linear(x, name, weight, bias):
        # torch's Linear keeps [out, in]; MatMul wants [in, out].
        y = g.op("MatMul", [x, g.const(f"{name}.weight", weight.T)], f"{name}.matmul")
        return g.op("Add", [y, g.const(f"{name}.bias", bias)], f"{name}.out")

    # Embeddings: word + (position + token type 0), positions sliced to L.
    word = g.op("Gather", [g.const("embeddings.word", w("embeddings.word_embeddings.weight")), "input_ids"],
                "embeddings.word_lookup", axis=0)
    shape = g.op("Shape", ["input_ids"], "embeddings.ids_shape")
    length = g.op("Slice", [shape, "one_1d", "two_1d", "zero_1d"], "embeddings.length")
    positions = w("embeddings.position_embeddings.weight") + w("embeddings.token_type_embeddings.weight")[0]
    positions = g.op("Slice", [g.const("embeddings.position_plus_type0", positions), "zero_1d", length, "zero_1d"],
                     "embeddings.positions")
    x = g.op("Add", [word, positions], "embeddings.sum")
    x = layer_norm(x, "embeddings.LayerNorm", w("embeddings.LayerNorm.weight"), w("embeddings.LayerNorm.bias"))

    # The mask, as a float [N, L] and as the additive attention bias [N, 1, 1, L].
    mask = g.op("Cast", ["attention_mask"], "mask.float", to=TensorProto.FLOAT)
    inverted = g.op("Sub", ["one", mask], "mask.inverted")
    bias = g.op("Mul", [inverted, "mask_min"], "mask.bias_2d")
    bias = g.op("Unsqueeze", [bias, "axes_1_2"], "mask.bias")

    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}"
        q = linear(x, f"{p}.attention.self.query", w(f"{p}.attention.self.query.weight"),
                   w(f"{p}.attention.self.query.bias"))
        k = linear(x, f"{p}.attention.self.key", w(f"{p}.attention.self.key.weight"),
                   w(f"{p}.attention.self.key.bias"))
        v = linear(x, f"{p}.attention.self.value", w(f"{p}.attention.self.value.weight"),
                   w(f"{p}.attention.self.value.bias"))
        q = g.op("Reshape", [q, "shape_heads"], f"{p}.q_heads")
        k = g.op("Reshape", [k, "shape_heads"], f"{p}.k_heads")
        v = g.op("Reshape", [v, "shape_heads"], f"{p}.v_heads")
        q = g.op("Transpose", [q], f"{p}.q_t", perm=[0, 2, 1, 3])  # [N, h, L, d]
        k = g.op("Transpose", [k], f"{p}.k_t", perm=[0, 2, 3, 1])  # [N, h, d, L]
        v = g.op("Transpose", [v], f"{p}.v_t", perm=[0, 2, 1, 3])  # [N, h, L, d]
        scores = g.op("MatMul", [q, k], f"{p}.scores_raw")  # [N, h, L, L]
        scores = g.op("Mul", [scores, "score_scale"], f"{p}.scores_scaled")
        scores = g.op("Add", [scores, bias], f"{p}.scores")
        probs = g.op("Softmax", [scores], f"{p}.probs", axis=-1)
        ctx = g.op("MatMul", [probs, v], f"{p}.context_heads")  # [N, h, L, d]
        ctx = g.op("Transpose", [ctx], f"{p}.context_t", perm=[0, 2, 1, 3])
        ctx = g.op("Reshape", [ctx, "shape_hidden"], f"{p}.context")
        attn = linear(ctx, f"{p}.attention.output.dense", w(f"{p}.attention.output.dense.weight"),
                      w(f"{p}.attention.output.dense.bias"))
        attn = g.op("Add", [attn, x], f"{p}.attention.residual")
        x = layer_norm(attn, f"{p}.attention.output.LayerNorm", w(f"{p}.attention.output.LayerNorm.weight"),
                       w(f"{p}.attention.output.LayerNorm.bias"))
        h = linear(x, f"{p}.intermediate.dense", w(f"{p}.intermediate.dense.weight"),
                   w(f"{p}.intermediate.dense.bias"))
        # GELU(h) = h * (1 + erf(h / sqrt 2)) * 0.5
        e = g.op("Erf", [g.op("Div", [h, "sqrt2"], f"{p}.gelu.scaled")], f"{p}.gelu.erf")
        e = g.op("Add", [e, "one"], f"{p}.gelu.plus1")
        h = g.op("Mul", [g.op("Mul", [h, e], f"{p}.gelu.product"), "half"], f"{p}.gelu.out")
        out = linear(h, f"{p}.output.dense", w(f"{p}.output.dense.weight"), w(f"{p}.output.dense.bias"))
        out = g.op("Add", [out, x], f"{p}.output.residual")
        x = layer_norm(out, f"{p}.output.LayerNorm", w(f"{p}.output.LayerNorm.weight"),
                       w(f"{p}.output.LayerNorm.bias"))

    # Mean pooling over the mask (sentence-transformers' Pooling), then L2 (Normalize).
    m = g.op("Unsqueeze", [mask, "axes_last"], "pool.mask")  # [N, L, 1]
    summed = g.op("ReduceSum", [g.op("Mul", [x, m], "pool.masked"), "axes_1"], "pool.sum", keepdims=0)  # [N, H]
    count = g.op("ReduceSum", [m, "axes_1"], "pool.count_raw", keepdims=0)  # [N, 1]
    count = g.op("Max", [count, "eps_count"], "pool.count")
    mean = g.op("Div", [summed, count], "pool.mean")
    norm = g.op("ReduceSum", [g.op("Mul", [mean, mean], "norm.square"), "axes_last"], "norm.sum", keepdims=1)
    norm = g.op("Max", [g.op("Sqrt", [norm], "norm.length"), "eps_norm"], "norm.clamped")
    # Named as its output: tract names a graph output by its node where it has no label.
    g.nodes.append(helper.make_node("Div", [mean, norm], ["embedding"], name="embedding"))

    graph = helper.make_graph(
        g.nodes,
        "sentence-embedding",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["N", "L"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["N", "L"]),
        ],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["N", hidden])],
        g.initializers,
    )
    return helper.make_model(
        graph,
        producer_name="tensorplug examples/text-embedding/make_onnx.py",
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=8,
    )


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: make_onnx.py SRC_DIR OUT.onnx")
    src, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    config = json.loads((src / "config.json").read_text())
    model = build(config, read_safetensors(src / "model.safetensors"))
    onnx.checker.check_model(model, full_check=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    # Written beside, then renamed: a reader never sees half a graph.
    partial = out.with_name(out.name + ".partial")
    partial.write_bytes(model.SerializeToString())
    partial.replace(out)
    print(f"{out}: {out.stat().st_size} bytes, {len(model.graph.node)} nodes", file=sys.stderr)


if __name__ == "__main__":
    main()
