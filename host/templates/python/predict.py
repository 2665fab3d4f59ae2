"""The predict stage of {{name}}: y = 2 * x for a batch of `x: FP32 [N, 1]`; an item whose
x is negative fails alone with 422, its neighbours get their y. Read weights in `setup`:
module-level code runs when the component is built, not where it is served."""

import tensorplug as tp


class WitWorld(tp.Predictor):
    def setup(self, parameters):
        tp.debug("{{name}}: predict ready")

    def predict_batch(self, batch, failures):
        x = batch.get("x", tp.FP32, [-1, 1])
        y = tp.output("y", tp.FP32, x.shape)
        for i, value in enumerate(x.values):
            if value < 0:
                failures.fail(i, 422, f"x: {value:g} is negative")
            else:
                y.values[i] = 2 * value
        return [y]
