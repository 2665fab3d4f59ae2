"""The digits model's predict stage in Python: the same weights files and forward pass as
the Rust `digits-predict` (examples/digits/model), so the same answers. Loads
W0/b0/W1/b1.f32 from the model folder in `setup` and classifies a batch
`input-0: FP32 [N, 64]` into `probabilities: FP32 [N, 10]` and `label: INT64 [N]`.

With the parameter `graph`, it runs that graph of `model.toml`'s `[graphs]` through
`wasi:nn` instead (natively, in the host), as the digits-mixed model does with the
digits-onnx graph: same inputs, same outputs.

An image whose pixels are all 0 has nothing to classify: that item fails alone with a 422,
its neighbours get their rows. The plugin counts those (`blank_images`) and observes each
batch's size (`batch_size`) in its own metrics. Built by scripts/build-python-plugins.sh with
componentize-py and the SDK in sdk/python.
"""

import math
from array import array

import tensorplug as tp

INPUTS, HIDDEN, CLASSES = 64, 64, 10


def _floats(name: str, count: int) -> list[float]:
    values = array("f")
    values.frombytes(tp.read_model_file(name))
    if len(values) != count:
        raise ValueError(f"{name}: {len(values)} floats, expected {count}")
    return values.tolist()


class WitWorld(tp.Predictor):
    def setup(self, parameters: dict[str, str]) -> None:
        # Kept on the class: componentize-py may make a new WitWorld for each call.
        weights = WitWorld
        weights.graph = tp.graph(parameters["graph"]) if "graph" in parameters else None
        tp.declare("labels", "0,1,2,3,4,5,6,7,8,9")
        if weights.graph is not None:
            tp.declare("description", "The digits MLP as an ONNX graph, run through wasi:nn "
                                      "by a plugin written in Python")
            return
        w0 = _floats("W0.f32", INPUTS * HIDDEN)
        w1 = _floats("W1.f32", HIDDEN * CLASSES)
        weights.w0 = [w0[k * HIDDEN:(k + 1) * HIDDEN] for k in range(INPUTS)]
        weights.b0 = _floats("b0.f32", HIDDEN)
        weights.w1 = [w1[k * CLASSES:(k + 1) * CLASSES] for k in range(HIDDEN)]
        weights.b1 = _floats("b1.f32", CLASSES)
        tp.debug("digits-python: weights loaded from " + tp.MODEL_DIR)
        tp.declare("description", "The digits MLP, predicted by a plugin written in Python")

    def predict_batch(self, batch: tp.Item, failures: tp.Failures):
        pixels = batch.get("input-0", tp.FP32, [-1, INPUTS])
        blank = {i for i, image in enumerate(pixels.rows()) if not any(image)}
        for i in blank:
            failures.fail(i, 422, "input-0: every pixel is 0, there is no digit to classify")
        # The plugin's own metrics, on the host's /metrics as tensorplug_plugin_*.
        tp.histogram_observe("batch_size", len(pixels))
        if blank:
            tp.counter_add("blank_images", len(blank))
        if self.graph is not None:
            computed = self.graph.compute({"input-0": pixels})
            return [computed["probabilities"], computed["label"]]
        n = len(pixels)
        probabilities = tp.output("probabilities", tp.FP32, [n, CLASSES])
        labels = tp.output("label", tp.INT64, [n])
        for i, image in enumerate(pixels.rows()):
            if i not in blank:
                labels.values[i] = self.classify(image, probabilities.row(i))
        return [probabilities, labels]

    def classify(self, image, proba) -> int:
        """Writes softmax probabilities into `proba`; returns the most probable class (the
        first on ties, like numpy's argmax)."""
        hidden = list(self.b0)
        for x, row in zip(image, self.w0):
            if x:
                for j in range(HIDDEN):
                    hidden[j] += x * row[j]
        z = list(self.b1)
        for h, row in zip(hidden, self.w1):
            if h > 0.0:  # ReLU
                for j in range(CLASSES):
                    z[j] += h * row[j]
        best = max(range(CLASSES), key=z.__getitem__)
        exps = [math.exp(v - z[best]) for v in z]
        total = sum(exps)
        for j in range(CLASSES):
            proba[j] = exps[j] / total
        return best
