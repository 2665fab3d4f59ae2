"""Unit tests of the Python SDK under the machine's Python, against the bindings
componentize-py generates (scripts/test-sdks.sh puts them on the path); the host's imports
are replaced by fakes."""

import struct
import unittest
from array import array
from unittest import mock

from componentize_py_types import Err, Ok
from wit_world.imports import log as wit_log
from wit_world.imports import metadata as wit_metadata
from wit_world.imports import metrics as wit_metrics
from wit_world.imports import tensorplug_plugin_types as types

import tensorplug as tp


def f32(*values):
    return array("f", values).tobytes()


def tensor(name, datatype, shape, data):
    return types.Tensor(name, datatype, list(shape), data)


class Views(unittest.TestCase):
    def test_a_view_reads_typed_values_by_row(self):
        view = tp.TensorView(tensor("x", tp.FP32, [2, 3], f32(1, 2, 3, 4, 5, 6)))
        self.assertEqual(view.shape, (2, 3))
        self.assertEqual(len(view), 2)
        self.assertEqual(list(view.row(1)), [4.0, 5.0, 6.0])
        self.assertEqual([list(r) for r in view.rows()], [[1, 2, 3], [4, 5, 6]])

    def test_int64_and_bool_views(self):
        view = tp.TensorView(tensor("n", tp.INT64, [2], struct.pack("<2q", -1, 7)))
        self.assertEqual(list(view.values), [-1, 7])
        flags = tp.TensorView(tensor("b", tp.BOOL, [2], bytes([1, 0])))
        self.assertEqual(list(flags.values), [True, False])

    def test_data_that_does_not_fill_the_shape_is_a_400(self):
        with self.assertRaises(tp.ItemError) as refused:
            tp.TensorView(tensor("x", tp.FP32, [2, 3], f32(1, 2)))
        self.assertEqual(refused.exception.status, 400)
        self.assertIn("do not fill shape [2, 3]", refused.exception.message)

    def test_bytes_elements_round_trip_and_a_cut_one_is_a_400(self):
        out = tp.output("s", tp.BYTES, [2], ["ab", b"\x00\xff"])
        wit = out.to_wit()
        self.assertEqual(wit.data, b"\x02\x00\x00\x00ab\x02\x00\x00\x00\x00\xff")
        self.assertEqual(tp.TensorView(wit).values, [b"ab", b"\x00\xff"])
        for cut, why in ((11, "longer than the data"), (7, "cut short")):
            with self.assertRaises(tp.ItemError) as refused:
                tp.TensorView(tensor("s", tp.BYTES, [2], wit.data[:cut]))
            self.assertIn(why, refused.exception.message)

    def test_expect_checks_datatype_and_shape_with_wildcards(self):
        view = tp.TensorView(tensor("x", tp.FP32, [4, 1], f32(1, 2, 3, 4)))
        self.assertIs(view.expect(tp.FP32, [-1, 1]), view)
        for datatype, shape, why in ((tp.INT32, [-1, 1], "expected INT32, got FP32"),
                                     (tp.FP32, [-1, 2], "expected shape [-1, 2], got [4, 1]"),
                                     (tp.FP32, [-1], "expected shape [-1]")):
            with self.assertRaises(tp.ItemError) as refused:
                view.expect(datatype, shape)
            self.assertEqual(refused.exception.status, 400)
            self.assertIn(why, refused.exception.message)

    def test_an_item_names_the_missing_tensor(self):
        item = tp.Item([tensor("x", tp.FP32, [1], f32(1))])
        self.assertEqual(list(item), ["x"])
        with self.assertRaises(tp.ItemError) as refused:
            item["y"]
        self.assertEqual((refused.exception.status, refused.exception.message), (400, "missing input tensor 'y'"))


class Outputs(unittest.TestCase):
    def test_outputs_are_zero_filled_and_writable_by_row(self):
        out = tp.output("y", tp.FP32, [2, 2])
        out.row(1)[:] = array("f", [3, 4])
        wit = out.to_wit()
        self.assertEqual((wit.name, wit.datatype, wit.shape), ("y", tp.FP32, [2, 2]))
        self.assertEqual(array("f", wit.data).tolist(), [0, 0, 3, 4])

    def test_values_must_fill_the_shape(self):
        self.assertEqual(array("q", tp.output("n", tp.INT64, [2], [5, -6]).to_wit().data).tolist(), [5, -6])
        with self.assertRaises(ValueError):
            tp.output("y", tp.FP32, [2], [1, 2, 3])


class Stages(unittest.TestCase):
    def setUp(self):
        self.logged = []
        patch = mock.patch.object(wit_log, "log", lambda level, message: self.logged.append((level, message)))
        patch.start()
        self.addCleanup(patch.stop)

    def test_predict_keeps_failures_per_item_and_refusals_per_batch(self):
        class Doubler(tp.Predictor):
            def predict_batch(self, batch, failures):
                x = batch.get("x", tp.FP32, [-1, 1])
                if 2.0 in x.values and len(x) == 1:
                    raise tp.ItemError(422, "two")
                if 99.0 in x.values:
                    raise KeyError("a bug")
                for i, v in enumerate(x.values):
                    if v < 0:
                        failures.fail(i, 422, "negative")
                return [tp.output("y", tp.FP32, x.shape, [2 * v for v in x.values])]

        answer = Doubler().predict([tensor("x", tp.FP32, [3, 1], f32(1, -1, 2))])
        self.assertEqual(answer.failures, [types.ItemFailure(1, types.ItemError(422, "negative"))])
        self.assertEqual(array("f", answer.outputs[0].data).tolist(), [2, -2, 4])
        with self.assertRaises(Err) as refused:
            Doubler().predict([tensor("x", tp.FP32, [1, 1], f32(2))])
        self.assertEqual(refused.exception.value, types.ItemError(422, "two"))
        with self.assertRaises(Err) as bug:
            Doubler().predict([tensor("x", tp.FP32, [1, 1], f32(99))])
        self.assertEqual(bug.exception.value, types.ItemError(500, "KeyError: 'a bug'"))
        self.assertEqual(len(self.logged), 1)
        self.assertEqual(self.logged[0][0], wit_log.Level.ERROR)
        self.assertIn("Traceback", self.logged[0][1])

    def test_a_huge_exception_message_is_cut_in_the_answer_and_the_log(self):
        class Loud(tp.Predictor):
            def predict_batch(self, batch, failures):
                raise RuntimeError("x" * (16 << 20))

        with self.assertRaises(Err) as bug:
            Loud().predict([tensor("x", tp.FP32, [1, 1], f32(1))])
        self.assertEqual(bug.exception.value.status, 500)
        message = bug.exception.value.message
        self.assertTrue(message.startswith("RuntimeError: xxx"), message[:40])
        self.assertLess(len(message), 4200)
        self.assertIn("more characters", message)
        self.assertEqual(len(self.logged), 1)
        self.assertIn("Traceback", self.logged[0][1])
        self.assertLess(len(self.logged[0][1]), 8192)

    def test_item_stages_isolate_each_item(self):
        class Post(tp.Postprocessor):
            def setup(self, parameters):
                if parameters.get("fail") == "yes":
                    raise OSError("no weights")

            def process_item(self, item):
                v = item["x"].values[0]
                if v < 0:
                    raise tp.ItemError(422, "negative")
                if v == 0:
                    raise ZeroDivisionError("zero")
                return [tp.output("y", tp.FP32, [1], [2 * v])]

        Post().init([types.Parameter("fail", "no")])
        with self.assertRaises(Err) as failed:
            Post().init([types.Parameter("fail", "yes")])
        self.assertEqual(failed.exception.value, "OSError: no weights")
        results = Post().postprocess([[tensor("x", tp.FP32, [1], f32(v))] for v in (1, -1, 0)])
        self.assertIsInstance(results[0], Ok)
        self.assertEqual(array("f", results[0].value[0].data).tolist(), [2])
        self.assertEqual(results[1], Err(types.ItemError(422, "negative")))
        self.assertEqual(results[2], Err(types.ItemError(500, "ZeroDivisionError: zero")))


class HostCalls(unittest.TestCase):
    def test_metrics_pass_labels_and_turn_refusals_into_value_errors(self):
        calls = []

        def counter_add(name, labels, value):
            calls.append((name, labels, value))
            if name == "bad name":
                raise Err("a name is 1-64 characters of [a-zA-Z0-9_]")

        with mock.patch.object(wit_metrics, "counter_add", counter_add):
            tp.counter_add("items", 2, stage="predict")
            with self.assertRaises(ValueError) as refused:
                tp.counter_add("bad name")
        self.assertEqual(calls[0], ("items", [wit_metrics.Label("stage", "predict")], 2.0))
        self.assertIn("metric bad name: a name is", str(refused.exception))

    def test_declare_turns_refusals_into_value_errors(self):
        def declare(key, value):
            raise Err("callable only during init")

        with mock.patch.object(wit_metadata, "declare", declare):
            with self.assertRaises(ValueError) as refused:
                tp.declare("labels", "0,1")
        self.assertIn("metadata labels: callable only during init", str(refused.exception))


if __name__ == "__main__":
    unittest.main()
