#!/usr/bin/env python3
"""Writes a small ResNet-style CNN as ONNX: examples/models/tiny-resnet/tiny-resnet.onnx, a
heavier graph than the digits ones for the wasi:nn backends (benchmarks and tests), and
its consistency oracle tests/data/tiny-resnet/oracle.json (ONNX Runtime's outputs for a
few fixed inputs).

    input-0 [N, 1, 28, 28]
    Conv 3x3, 24 -> BN -> Relu                                   [N, 24, 28, 28]
    1 residual block, 24 channels                                [N, 24, 28, 28]
    2 residual blocks, 48 channels (the first strided, 1x1 shortcut)  [N, 48, 14, 14]
    2 residual blocks, 96 channels (the first strided, 1x1 shortcut)  [N, 96, 7, 7]
    GlobalAveragePool -> Flatten -> Gemm 96x10 -> probabilities (Softmax), label (ArgMax)

A residual block: Conv 3x3 -> BN -> Relu -> Conv 3x3 -> BN, plus the shortcut, -> Relu.
About 370 K parameters, 37 M multiply-adds per image. The weights are initialised
(He-normal, seeded; batch-norm statistics drawn near 0 and 1), not trained: the outputs
mean nothing, so its test checks that tensorplug computes what ONNX Runtime does on the
same inputs (the oracle), not a digit. A rerun writes the same files. Building and
testing need no Python; to run it again:

    python3 -m venv target/onnx-env
    target/onnx-env/bin/pip install onnx numpy onnxruntime==1.32.0
    target/onnx-env/bin/python examples/tiny-resnet/make_onnx.py
"""

import json
import pathlib

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "examples/models/tiny-resnet/tiny-resnet.onnx"
ORACLE = ROOT / "tests/data/tiny-resnet/oracle.json"

rng = np.random.default_rng(22)
nodes = []
initializers = []


def tensor(name, array):
    initializers.append(numpy_helper.from_array(array.astype(np.float32), name))
    return name


def conv(x, name, cin, cout, k, stride):
    fan_in = cin * k * k
    w = rng.normal(0.0, np.sqrt(2.0 / fan_in), size=(cout, cin, k, k))
    nodes.append(
        helper.make_node(
            "Conv",
            [x, tensor(name + ".w", w)],
            [name],
            name=name,
            kernel_shape=[k, k],
            pads=[k // 2] * 4,
            strides=[stride, stride],
        )
    )
    return name


def bn(x, name, c):
    scale = tensor(name + ".scale", rng.uniform(0.8, 1.2, size=c))
    bias = tensor(name + ".bias", rng.normal(0.0, 0.1, size=c))
    mean = tensor(name + ".mean", rng.normal(0.0, 0.1, size=c))
    var = tensor(name + ".var", rng.uniform(0.8, 1.2, size=c))
    nodes.append(helper.make_node("BatchNormalization", [x, scale, bias, mean, var], [name], name=name, epsilon=1e-5))
    return name


def relu(x, name):
    nodes.append(helper.make_node("Relu", [x], [name], name=name))
    return name


def block(x, name, cin, cout, stride):
    y = relu(bn(conv(x, name + ".conv1", cin, cout, 3, stride), name + ".bn1", cout), name + ".relu1")
    y = bn(conv(y, name + ".conv2", cout, cout, 3, 1), name + ".bn2", cout)
    shortcut = x
    if stride != 1 or cin != cout:
        shortcut = bn(conv(x, name + ".down", cin, cout, 1, stride), name + ".downbn", cout)
    nodes.append(helper.make_node("Add", [y, shortcut], [name + ".sum"], name=name + ".sum"))
    return relu(name + ".sum", name + ".out")


def build():
    x = relu(bn(conv("input-0", "stem", 1, 24, 3, 1), "stem.bn", 24), "stem.relu")
    x = block(x, "s1b1", 24, 24, 1)
    x = block(x, "s2b1", 24, 48, 2)
    x = block(x, "s2b2", 48, 48, 1)
    x = block(x, "s3b1", 48, 96, 2)
    x = block(x, "s3b2", 96, 96, 1)
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pooled"], name="pool"))
    nodes.append(helper.make_node("Flatten", ["pooled"], ["flat"], name="flatten"))
    w = rng.normal(0.0, np.sqrt(1.0 / 96), size=(10, 96))
    nodes.append(
        helper.make_node(
            "Gemm", ["flat", tensor("fc.w", w), tensor("fc.b", np.zeros(10))], ["logits"], name="fc", transB=1
        )
    )
    nodes.append(helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax", axis=1))
    nodes.append(helper.make_node("ArgMax", ["logits"], ["label"], name="argmax", axis=1, keepdims=1))
    graph = helper.make_graph(
        nodes,
        "tiny-resnet",
        [helper.make_tensor_value_info("input-0", TensorProto.FLOAT, ["N", 1, 28, 28])],
        [
            helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", 10]),
            helper.make_tensor_value_info("label", TensorProto.INT64, ["N", 1]),
        ],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="tensorplug")
    model.ir_version = 7
    onnx.checker.check_model(model)
    return model


def inputs(n):
    """`n` fixed images the oracle and the tests share: pixel (i, y, x) is a smooth
    pattern in 0..1, different per image."""
    i, y, x = np.meshgrid(np.arange(n), np.arange(28), np.arange(28), indexing="ij")
    return (0.5 + 0.5 * np.sin(0.3 * x + 0.2 * y + 1.7 * i) * np.cos(0.1 * x * (i % 3 + 1))).astype(np.float32)


def main():
    model = build()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, OUT)
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(OUT), options, providers=["CPUExecutionProvider"])
    images = inputs(8)
    probabilities, label = session.run(None, {"input-0": images[:, None, :, :]})
    ORACLE.parent.mkdir(parents=True, exist_ok=True)
    ORACLE.write_text(
        json.dumps(
            {
                "about": "ONNX Runtime "
                + onnxruntime.__version__
                + "'s outputs for examples/models/tiny-resnet on 8 images (examples/tiny-resnet/make_onnx.py)",
                "images": [[round(float(v), 7) for v in image.ravel()] for image in images],
                "probabilities": [[float(v) for v in row] for row in probabilities],
                "label": [int(v) for v in label.ravel()],
            }
        )
        + "\n"
    )
    print(f"{OUT.relative_to(ROOT)}: {len(model.graph.node)} nodes, {params} parameters; labels {label.ravel().tolist()}")


if __name__ == "__main__":
    main()
