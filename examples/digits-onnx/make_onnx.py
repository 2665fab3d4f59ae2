#!/usr/bin/env python3
"""Writes examples/models/digits-onnx/digits.onnx: the digits MLP of examples/models/digits
as an ONNX graph, from the same weight files (W0, b0, W1, b1 .f32; see that folder's
README.md and manifest.json), with the `onnx` package's helper API.

    input-0:       FP32 [N, 64]   raw pixels 0..16
    h = Relu(input-0 @ W0 + b0);  z = h @ W1 + b1
    probabilities: FP32 [N, 10]   Softmax(z, axis=1)
    label:         INT64 [N]      ArgMax(z, axis=1), first index on ties (numpy's argmax)

The output is committed, so building and testing need no Python; run this again only to
change the graph (it checks the weights against manifest.json's sha256 sums first):

    python3 -m venv target/onnx-env && target/onnx-env/bin/pip install onnx numpy
    target/onnx-env/bin/python examples/digits-onnx/make_onnx.py
"""

import hashlib
import json
import pathlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = pathlib.Path(__file__).resolve().parents[2]
WEIGHTS = ROOT / "examples/models/digits"
OUT = ROOT / "examples/models/digits-onnx/digits.onnx"


def load(manifest, name):
    entry = next(t for t in manifest["tensors"] if t["name"] == name)
    raw = (WEIGHTS / entry["file"]).read_bytes()
    if hashlib.sha256(raw).hexdigest() != entry["sha256"]:
        raise SystemExit(f"{entry['file']}: sha256 differs from manifest.json")
    return numpy_helper.from_array(np.frombuffer(raw, dtype="<f4").reshape(entry["shape"]), name)


def main():
    manifest = json.loads((WEIGHTS / "manifest.json").read_text())
    initializers = [load(manifest, n) for n in ("W0", "b0", "W1", "b1")]
    nodes = [
        helper.make_node("MatMul", ["input-0", "W0"], ["xw0"], name="hidden_matmul"),
        helper.make_node("Add", ["xw0", "b0"], ["h_pre"], name="hidden_bias"),
        helper.make_node("Relu", ["h_pre"], ["h"], name="hidden_relu"),
        helper.make_node("MatMul", ["h", "W1"], ["hw1"], name="output_matmul"),
        helper.make_node("Add", ["hw1", "b1"], ["z"], name="output_bias"),
        helper.make_node("Softmax", ["z"], ["probabilities"], name="softmax", axis=1),
        helper.make_node("ArgMax", ["z"], ["label"], name="argmax", axis=1, keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "digits-mlp",
        [helper.make_tensor_value_info("input-0", TensorProto.FLOAT, ["N", 64])],
        [
            helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", 10]),
            helper.make_tensor_value_info("label", TensorProto.INT64, ["N"]),
        ],
        initializers,
    )
    model = helper.make_model(
        graph,
        producer_name="tensorplug examples/digits-onnx/make_onnx.py",
        opset_imports=[helper.make_opsetid("", 13)],
        ir_version=8,
    )
    onnx.checker.check_model(model, full_check=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_bytes(model.SerializeToString())
    print(f"{OUT.relative_to(ROOT)}: {OUT.stat().st_size} bytes")


if __name__ == "__main__":
    main()
