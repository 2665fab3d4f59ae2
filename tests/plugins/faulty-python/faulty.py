"""A predictor in Python that misbehaves on request, for the host's fault tests in every
language (tests/e2e/interpreted.rs); built with the SDK (sdk/python).

Input `x: FP32 [N, 1]`, output `y: FP32 [N, 1] = 2 * x`. An item whose value is one of
these codes triggers a fault:

| x | fault |
| --- | --- |
| -1 | raises RuntimeError in `predict_batch` (the SDK answers the batch 500; the host splits it) |
| -2 | loops forever (the deadline) |
| -3 | allocates until memory runs out |
| -5 | fails alone: 422 "faulty-python: item rejected" |
| -11 | prints 1 MiB to stdout and to stderr, then answers as usual (the host keeps 64 KiB) |
| -12 | raises RuntimeError with a 16 MiB message (the SDK cuts it: the item's 500) |
| -51 | the batch also answers `blob: BYTES [N, 1]`, whose element is 80 MiB for this item and empty for the others (declare no outputs, so `blob` may appear; past `max_answer_mib` the item's 500) |
| -4 | recurses without end (Python's RecursionError: the item's 500) |
| -9 | sleeps 3 s (`time.sleep`, a WASI poll: the deadline cuts it) |
| -60 | tries the sandbox's walls and fails the item 422 with what each attempt met: a file outside the model folder, the environment, a socket, a subprocess (a wall that gives way says BREACH) |
| -71 | raises from the export itself, past the SDK (componentize-py traps) |
"""

import os
import sys
import time

import tensorplug as tp

# Code -51's element of `blob`: far past any test's max_answer_mib, and enough that the
# instance grows more than the 64 MiB past its start after which the host replaces it.
HUGE = 80 << 20


def _recurse(depth):
    return _recurse(depth + 1) + 1


def _walls():
    """What each attempt to leave the sandbox met."""
    met = []
    for path in ("/etc/passwd", "/model/../../etc/passwd", "/proc/self/environ"):
        try:
            with open(path, "rb") as f:
                met.append(f"BREACH read {path}: {f.read(16)!r}")
        except Exception as e:
            met.append(f"open {path}: {type(e).__name__}")
    met.append(f"environment: {len(os.environ)} variables" + (" BREACH" if os.environ else ""))
    try:
        import socket

        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.connect(("127.0.0.1", 8080))
        met.append("BREACH socket connected")
    except Exception as e:
        met.append(f"socket: {type(e).__name__}")
    try:
        import subprocess

        subprocess.run(["/bin/sh", "-c", "true"], check=True)
        met.append("BREACH subprocess ran")
    except Exception as e:
        met.append(f"subprocess: {type(e).__name__}")
    return "; ".join(met)


class WitWorld(tp.Predictor):
    def predict(self, batch):
        if any(v == -71 for v in tp.Item(batch)["x"].values):
            raise RuntimeError("faulty-python: raised past the SDK")
        return super().predict(batch)

    def predict_batch(self, batch: tp.Item, failures: tp.Failures):
        x = batch.get("x", tp.FP32, [-1, 1])
        y = tp.output("y", tp.FP32, x.shape)
        for i, value in enumerate(x.values):
            if value == -1:
                raise RuntimeError("faulty-python: exception requested")
            if value == -2:
                while True:
                    pass
            if value == -3:
                hog = []
                while True:
                    hog.append(bytearray(1 << 20))
            if value == -5:
                failures.fail(i, 422, "faulty-python: item rejected")
            if value == -4:
                _recurse(0)
            if value == -9:
                time.sleep(3)
            if value == -60:
                failures.fail(i, 422, "faulty-python walls: " + _walls())
            if value == -12:
                raise RuntimeError("faulty-python: " + "x" * (16 << 20))
            if value == -11:
                for _ in range(256):
                    print("o" * 4095)
                    print("e" * 4095, file=sys.stderr)
            y.values[i] = 2 * value
        tp.counter_add("batches")
        if any(v == -51 for v in x.values):
            # BYTES elements have sizes of their own: only this item's row is huge, so its
            # neighbours in the call stay answerable (an FP32 row is as wide as the widest).
            blobs = [b"\xff" * HUGE if v == -51 else b"" for v in x.values]
            return [y, tp.output("blob", tp.BYTES, x.shape, blobs)]
        return [y]
