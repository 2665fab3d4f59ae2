#!/usr/bin/env python3
"""Trains a small convolutional net on scikit-learn's 8x8 digits and writes it as ONNX:
examples/models/digits-cnn/digits-cnn.onnx, plus its own oracle,
tests/data/digits-cnn/test_oracle.jsonl (the graph's answers for the 450 test images of
tests/data/digits/test_requests.jsonl, computed by onnx's reference evaluator).

    input-0 [N, 64] raw pixels 0..16 -> /16 -> [N, 1, 8, 8]
    Conv 3x3, 16 filters, pad 1 -> Relu -> MaxPool 2x2      [N, 16, 4, 4]
    Conv 3x3, 32 filters, pad 1 -> Relu -> MaxPool 2x2      [N, 32, 2, 2]
    Flatten -> Gemm 128x10 -> probabilities (Softmax), label (ArgMax)

Same split as the digits MLP (train_test_split(test_size=0.25, random_state=0)); plain
numpy with Adam, seeded, so a rerun writes the same files. The outputs are committed:
building and testing need no Python. To run it again:

    python3 -m venv target/onnx-env
    target/onnx-env/bin/pip install onnx numpy scikit-learn
    target/onnx-env/bin/python examples/digits-cnn/train.py
"""

import json
import pathlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "examples/models/digits-cnn/digits-cnn.onnx"
ORACLE = ROOT / "tests/data/digits-cnn/test_oracle.jsonl"


def im2col(x, k=3):
    """x [N, C, H, W] with padding 1 -> [N, H, W, C*k*k]."""
    n, c, h, w = x.shape
    p = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.empty((n, h, w, c, k, k), dtype=x.dtype)
    for i in range(k):
        for j in range(k):
            cols[:, :, :, :, i, j] = p[:, :, i : i + h, j : j + w].transpose(0, 2, 3, 1)
    return cols.reshape(n, h, w, c * k * k)


def col2im(dcols, shape, k=3):
    n, c, h, w = shape
    dcols = dcols.reshape(n, h, w, c, k, k)
    dp = np.zeros((n, c, h + 2, w + 2), dtype=dcols.dtype)
    for i in range(k):
        for j in range(k):
            dp[:, :, i : i + h, j : j + w] += dcols[:, :, :, :, i, j].transpose(0, 3, 1, 2)
    return dp[:, :, 1:-1, 1:-1]


def conv(x, w, b):
    cols = im2col(x)
    out = cols @ w.reshape(w.shape[0], -1).T + b  # [N, H, W, F]
    return out.transpose(0, 3, 1, 2), cols


def maxpool(x):
    n, c, h, w = x.shape
    r = x.reshape(n, c, h // 2, 2, w // 2, 2)
    out = r.max(axis=(3, 5))
    mask = r == out[:, :, :, None, :, None]
    return out, mask


def forward(params, x):
    w1, b1, w2, b2, w3, b3 = params
    a0 = x.reshape(-1, 1, 8, 8) / 16.0
    z1, c1 = conv(a0, w1, b1)
    r1 = np.maximum(z1, 0)
    p1, m1 = maxpool(r1)
    z2, c2 = conv(p1, w2, b2)
    r2 = np.maximum(z2, 0)
    p2, m2 = maxpool(r2)
    f = p2.reshape(len(x), -1)
    logits = f @ w3 + b3
    return logits, (a0, z1, c1, r1, p1, m1, z2, c2, r2, p2, m2, f)


def backward(params, cache, dlogits):
    w1, b1, w2, b2, w3, b3 = params
    a0, z1, c1, r1, p1, m1, z2, c2, r2, p2, m2, f = cache
    dw3 = f.T @ dlogits
    db3 = dlogits.sum(0)
    dp2 = (dlogits @ w3.T).reshape(p2.shape)
    dr2 = (m2 * dp2[:, :, :, None, :, None]).reshape(r2.shape)
    dz2 = dr2 * (z2 > 0)
    dz2t = dz2.transpose(0, 2, 3, 1)  # [N, H, W, F]
    dw2 = (dz2t.reshape(-1, dz2t.shape[-1]).T @ c2.reshape(-1, c2.shape[-1])).reshape(w2.shape)
    db2 = dz2t.sum((0, 1, 2))
    dp1 = col2im(dz2t @ w2.reshape(w2.shape[0], -1), p1.shape)
    dr1 = (m1 * dp1[:, :, :, None, :, None]).reshape(r1.shape)
    dz1 = dr1 * (z1 > 0)
    dz1t = dz1.transpose(0, 2, 3, 1)
    dw1 = (dz1t.reshape(-1, dz1t.shape[-1]).T @ c1.reshape(-1, c1.shape[-1])).reshape(w1.shape)
    db1 = dz1t.sum((0, 1, 2))
    return [dw1, db1, dw2, db2, dw3, db3]


def softmax(z):
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def train(x, y):
    rng = np.random.default_rng(0)
    he = lambda shape, fan_in: (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
    params = [
        he((16, 1, 3, 3), 9), np.zeros(16, np.float32),
        he((32, 16, 3, 3), 144), np.zeros(32, np.float32),
        he((128, 10), 128), np.zeros(10, np.float32),
    ]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    step, lr = 0, 2e-3
    for epoch in range(30):
        order = rng.permutation(len(x))
        for start in range(0, len(x), 32):
            idx = order[start : start + 32]
            logits, cache = forward(params, x[idx])
            d = softmax(logits)
            d[np.arange(len(idx)), y[idx]] -= 1
            grads = backward(params, cache, (d / len(idx)).astype(np.float32))
            step += 1
            for i, g in enumerate(grads):
                m[i] = 0.9 * m[i] + 0.1 * g
                v[i] = 0.999 * v[i] + 0.001 * g * g
                mh, vh = m[i] / (1 - 0.9**step), v[i] / (1 - 0.999**step)
                params[i] = (params[i] - lr * mh / (np.sqrt(vh) + 1e-8)).astype(np.float32)
    return params


def to_onnx(params):
    w1, b1, w2, b2, w3, b3 = params
    init = [
        numpy_helper.from_array(np.array([-1, 1, 8, 8], np.int64), "image_shape"),
        numpy_helper.from_array(np.array(1.0 / 16.0, np.float32), "scale"),
        numpy_helper.from_array(w1, "conv1_w"), numpy_helper.from_array(b1, "conv1_b"),
        numpy_helper.from_array(w2, "conv2_w"), numpy_helper.from_array(b2, "conv2_b"),
        numpy_helper.from_array(w3, "dense_w"), numpy_helper.from_array(b3, "dense_b"),
    ]
    conv_attrs = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    pool_attrs = dict(kernel_shape=[2, 2], strides=[2, 2])
    nodes = [
        helper.make_node("Reshape", ["input-0", "image_shape"], ["image"]),
        helper.make_node("Mul", ["image", "scale"], ["x"]),
        helper.make_node("Conv", ["x", "conv1_w", "conv1_b"], ["c1"], **conv_attrs),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], **pool_attrs),
        helper.make_node("Conv", ["p1", "conv2_w", "conv2_b"], ["c2"], **conv_attrs),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("MaxPool", ["r2"], ["p2"], **pool_attrs),
        helper.make_node("Flatten", ["p2"], ["f"], axis=1),
        helper.make_node("MatMul", ["f", "dense_w"], ["fw"]),
        helper.make_node("Add", ["fw", "dense_b"], ["z"]),
        helper.make_node("Softmax", ["z"], ["probabilities"], axis=1),
        helper.make_node("ArgMax", ["z"], ["label"], axis=1, keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "digits-cnn",
        [helper.make_tensor_value_info("input-0", TensorProto.FLOAT, ["N", 64])],
        [
            helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", 10]),
            helper.make_tensor_value_info("label", TensorProto.INT64, ["N"]),
        ],
        init,
    )
    model = helper.make_model(
        graph,
        producer_name="tensorplug examples/digits-cnn/train.py",
        opset_imports=[helper.make_opsetid("", 13)],
        ir_version=8,
    )
    onnx.checker.check_model(model, full_check=True)
    return model


def main():
    digits = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        digits.data.astype(np.float32), digits.target, test_size=0.25, random_state=0
    )
    params = train(x_train, y_train)
    model = to_onnx(params)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_bytes(model.SerializeToString())

    requests = [json.loads(line) for line in (ROOT / "tests/data/digits/test_requests.jsonl").open()]
    x = np.array([r["inputs"][0]["data"] for r in requests], np.float32)
    assert np.array_equal(x, x_test), "test_requests.jsonl holds the same split's test images"
    proba, label = ReferenceEvaluator(model).run(None, {"input-0": x})
    accuracy = float((label == y_test).mean())
    ORACLE.parent.mkdir(parents=True, exist_ok=True)
    with ORACLE.open("w") as out:
        for r, t, p, l in zip(requests, y_test, proba, label):
            line = {"id": r["id"], "label": int(t), "predict": int(l), "predict_proba": [float(v) for v in p]}
            out.write(json.dumps(line, separators=(",", ":")) + "\n")
    print(f"{OUT.relative_to(ROOT)}: {OUT.stat().st_size} bytes; test accuracy {accuracy:.4f}")


if __name__ == "__main__":
    main()
