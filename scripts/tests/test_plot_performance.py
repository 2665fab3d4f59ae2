"""scripts/plot-performance.py on small made-up benchmark output: what it reads, and that
every figure is SVG an XML parser takes, with the series, bars and labels it should have.

Run: python3 -m unittest discover -s scripts/tests (well under a second, no packages).
"""

import importlib.util
import io
import json
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET
from contextlib import redirect_stdout
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "plot-performance.py"
spec = importlib.util.spec_from_file_location("plot_performance", SCRIPT)
plot = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = plot  # dataclasses look their module up there
spec.loader.exec_module(plot)

SVG = "{http://www.w3.org/2000/svg}"


def floor_row(server, protocol, concurrency, round_, rps, p99_us, errors=0):
    return {
        "server": server,
        "protocol": protocol,
        "concurrency": concurrency,
        "round": round_,
        "rps": rps,
        "p50_us": p99_us // 4,
        "p99_us": p99_us,
        "errors": errors,
    }


FLOOR_ROWS = [
    floor_row(server, protocol, c, round_, rps * (1 + 0.1 * round_), p99 * round_)
    for round_ in (1, 2, 3)
    for protocol, scale in (("rest", 1.0), ("grpc", 0.5))
    for c, rps_base, p99 in ((1, 5000, 300), (4, 15000, 500), (16, 30000, 900), (64, 40000, 3000))
    for server, rps in (("tensorplug", rps_base * scale), ("floor", rps_base * scale * 1.5))
]


def write_estimate(root, group, function, parameter, mean_ns):
    """A benchmark as criterion 0.5 leaves it: its ids, and its estimates in ns."""
    folder = root / group / function / parameter / "new"
    folder.mkdir(parents=True)
    (folder / "benchmark.json").write_text(
        json.dumps({"group_id": group, "function_id": function, "value_str": parameter, "throughput": None})
    )
    interval = {"confidence_level": 0.95, "lower_bound": mean_ns * 0.95, "upper_bound": mean_ns * 1.05}
    estimate = {"confidence_interval": interval, "point_estimate": mean_ns, "standard_error": mean_ns * 0.02}
    (folder / "estimates.json").write_text(json.dumps({"mean": estimate, "median": estimate, "slope": None}))


def parse(path):
    root = ET.parse(path).getroot()
    assert root.tag == SVG + "svg", root.tag
    return root


def texts(root):
    return [element.text for element in root.iter(SVG + "text")]


class EmbeddingsFigures(unittest.TestCase):
    def test_served_systems_by_concurrency_and_in_process_baselines_as_flat_lines(self):
        folder = Path(tempfile.mkdtemp())
        rows = [
            {"system": system, "concurrency": c, "rps": rps * c, "p50_us": 900, "p99_us": 2000 * c, "errors": 0}
            for system, rps in (("tensorplug", 50.0), ("infinity", 20.0))
            for c in (1, 8, 32)
        ]
        rows += [
            {"system": "onnxruntime", "mode": "batch32", "threads": 2, "sentences_per_s": 400.0, "p50_us": 70000, "p99_us": 90000},
            {"system": "onnxruntime", "mode": "batch1", "threads": 1, "sentences_per_s": 150.0, "p50_us": 6000, "p99_us": 9000},
            {"system": "tensorplug (onnxruntime) resident memory after the load", "rss_mib": 500},
        ]
        data = folder / "embeddings.jsonl"
        data.write_text("".join(json.dumps(row) + "\n" for row in rows))
        series = plot.embeddings_series(data)
        self.assertEqual(
            list(series), [("tensorplug", "rest"), ("infinity", "rest"), ("onnxruntime", "in-process")]
        )
        flat = series[("onnxruntime", "in-process")]
        self.assertEqual([(p.concurrency, p.rps_mean) for p in flat], [(1, 400.0), (8, 400.0), (32, 400.0)])
        with redirect_stdout(io.StringIO()):
            plot.main(["--embeddings", str(data), "--out", str(folder / "out"), "--machine", "test box"])
        for name in ("embeddings.svg", "embeddings-p99.svg"):
            root = parse(folder / "out" / name)
            self.assertEqual(len(root.findall(f".//{SVG}polyline")), 3, name)
            words = texts(root)
            for label in ("tensorplug REST", "infinity REST", "onnxruntime in process, batches of 32"):
                self.assertIn(label, words, name)


class FloorFigures(unittest.TestCase):
    def setUp(self):
        self.folder = Path(tempfile.mkdtemp())
        self.jsonl = self.folder / "floor.jsonl"
        self.jsonl.write_text("".join(json.dumps(row) + "\n" for row in FLOOR_ROWS) + "\n")

    def draw(self, *extra):
        with redirect_stdout(io.StringIO()):
            plot.main(["--floor", str(self.jsonl), "--out", str(self.folder / "out"), "--machine", "test box", *extra])

    def test_points_are_the_mean_rps_and_the_median_p99_of_the_rounds(self):
        series = plot.summarise_floor(plot.read_floor_runs(self.jsonl))
        self.assertEqual(
            list(series),
            [("tensorplug", "rest"), ("floor", "rest"), ("tensorplug", "grpc"), ("floor", "grpc")],
        )
        first = series[("tensorplug", "rest")][0]
        self.assertEqual((first.concurrency, first.rounds), (1, 3))
        self.assertAlmostEqual(first.rps_mean, 5000 * 1.2)
        self.assertAlmostEqual(first.rps_min, 5000 * 1.1)
        self.assertAlmostEqual(first.rps_max, 5000 * 1.3)
        self.assertEqual((first.p99_ms_median, first.p99_ms_min, first.p99_ms_max), (0.6, 0.3, 0.9))
        self.assertEqual([p.concurrency for p in series[("floor", "grpc")]], [1, 4, 16, 64])

    def test_each_chart_has_a_line_a_server_and_protocol_with_its_legend_axes_and_footer(self):
        self.draw()
        for name, axis in (("throughput.svg", "requests per second"), ("p99.svg", "p99 latency (ms, log scale)")):
            root = parse(self.folder / "out" / name)
            lines = root.findall(f".//{SVG}polyline")
            self.assertEqual(len(lines), 4, name)
            self.assertTrue(all(len(line.get("points").split()) == 4 for line in lines), name)
            words = texts(root)
            for label in ("tensorplug REST", "floor REST", "tensorplug gRPC", "floor gRPC", axis, "64"):
                self.assertIn(label, words, name)
            self.assertIn("concurrency (connections, log scale)", words)
            self.assertIn("Machine: test box", words)
            self.assertTrue(any(w.startswith("Data: scripts/bench-floor.sh") for w in words))

    def test_servers_draws_only_the_servers_named(self):
        extra = [floor_row("baseline", "rest", c, 1, 1000.0, 500) for c in (1, 4, 16, 64)]
        with self.jsonl.open("a") as rows:
            rows.write("".join(json.dumps(row) + "\n" for row in extra))
        self.draw()
        self.assertEqual(len(parse(self.folder / "out" / "throughput.svg").findall(f".//{SVG}polyline")), 5)
        self.draw("--servers", "tensorplug,floor")
        root = parse(self.folder / "out" / "throughput.svg")
        self.assertEqual(len(root.findall(f".//{SVG}polyline")), 4)
        self.assertNotIn("baseline REST", texts(root))
        with self.assertRaisesRegex(SystemExit, "no runs of nobody"):
            self.draw("--servers", "nobody")

    def test_errors_are_named_in_the_legend(self):
        self.jsonl.write_text(json.dumps(floor_row("tensorplug", "rest", 1, 1, 100.0, 900, errors=7)) + "\n")
        self.draw()
        self.assertIn("tensorplug REST (7 errors)", texts(parse(self.folder / "out" / "throughput.svg")))

    def test_a_line_that_is_not_json_is_named(self):
        self.jsonl.write_text('{"server": "floor"}\nnot json\n')
        with self.assertRaisesRegex(SystemExit, "floor.jsonl:1: no protocol"):
            self.draw()


class ForwardFigures(unittest.TestCase):
    def setUp(self):
        self.folder = Path(tempfile.mkdtemp())
        self.criterion = self.folder / "criterion"
        for function, base_ns in (("native", 300), ("wasm", 2000), ("tract_wasi_nn", 28000)):
            for batch in ("1", "8", "32"):
                write_estimate(self.criterion, "digits_forward", function, batch, base_ns * int(batch))
        for function in ("tract", "onnxruntime"):
            for batch in ("32", "1"):
                write_estimate(self.criterion, "forward_digits_cnn", function, batch, 10000 * int(batch))
        write_estimate(self.criterion, "plugin_language", "instantiate", "rust", 280000)
        self.out = self.folder / "out"

    def draw(self, *extra):
        with redirect_stdout(io.StringIO()):
            plot.main(["--criterion", str(self.criterion), "--out", str(self.out), "--machine", "test box", *extra])

    def test_groups_matching_the_pattern_with_functions_and_numeric_parameters_sorted(self):
        groups = plot.read_criterion(self.criterion, "forward", "mean")
        self.assertEqual(list(groups), ["digits_forward", "forward_digits_cnn"])
        cnn = sorted(groups["forward_digits_cnn"], key=lambda e: (e.function, plot.natural_key(e.parameter)))
        self.assertEqual([(e.function, e.parameter) for e in cnn][:2], [("onnxruntime", "1"), ("onnxruntime", "32")])
        self.assertAlmostEqual(cnn[1].us, 320.0)
        self.assertAlmostEqual(cnn[1].low_us, 304.0)
        self.assertEqual(sorted(["32", "8", "1"], key=plot.natural_key), ["1", "8", "32"])

    def test_one_bar_a_function_and_batch_size_with_its_value_printed(self):
        self.draw()
        root = parse(self.out / "forward-digits_forward.svg")
        bars = [rect for rect in root.iter(SVG + "rect") if float(rect.get("width")) == plot.BAR_WIDTH]
        self.assertEqual(len(bars), 9)
        words = texts(root)
        for label in ("native", "wasm", "tract_wasi_nn", "1", "8", "32", "0.300", "64.0", "896", "batch size"):
            self.assertIn(label, words)
        self.assertIn("µs per call (log scale)", words)
        self.assertIn("Machine: test box", words)
        # A backend has one colour in every chart.
        colours = {rect.get("fill") for rect in bars}
        self.assertEqual(len(colours), 3)

    def test_the_combined_figure_holds_every_group_and_stale_figures_go(self):
        self.out.mkdir()
        (self.out / "forward-gone.svg").write_text("<svg/>")
        self.draw()
        self.assertFalse((self.out / "forward-gone.svg").exists())
        self.assertTrue((self.out / "forward-forward_digits_cnn.svg").exists())
        words = texts(parse(self.out / "forward.svg"))
        self.assertIn("Forward pass: digits_forward", words)
        self.assertIn("Forward pass: forward_digits_cnn", words)
        self.assertEqual(words.count("Machine: test box"), 1)

    def test_no_matching_group_names_the_groups_there_are(self):
        with self.assertRaisesRegex(SystemExit, "groups found: digits_forward, forward_digits_cnn, plugin_language"):
            self.draw("--groups", "resnet")


def density_rows():
    samples = [
        {"t": 0.5 * i, "rss_mib": 100 + i, "held_mib": 90 + i, "reserved_mib": 10, "releasing_mib": 1.5 * i,
         "resident": 40 + i, "requests": 1000 * i,
         "loads": 300 * i, "evictions": 290 * i}
        for i in range(5)
    ]
    common = {"example": "digits", "models": 10000, "budget_mib": 512}
    return [
        {"kind": "first", "latencies_ms": [2.5, 1.5, 18.0, 2.0], **common},
        {"kind": "storm", "quiet": {"p99_us": 220}, **common},
        {"kind": "zipf", "concurrency": 32, "rps": 2000.0, "failed": 0, "every_s": 0.5, "samples": samples, **common},
        {"kind": "first", "latencies_ms": [9.4, 10.8], "label": "warm", **{**common, "example": "digits-python", "models": 100}},
    ]


class DensityFigures(unittest.TestCase):
    def setUp(self):
        self.folder = Path(tempfile.mkdtemp())
        self.jsonl = self.folder / "density.jsonl"
        self.jsonl.write_text("".join(json.dumps(row) + "\n" for row in density_rows()))

    def draw(self):
        with redirect_stdout(io.StringIO()):
            plot.main(["--density", str(self.jsonl), "--out", str(self.folder / "out"), "--machine", "test box"])

    def test_counters_become_rates_between_samples(self):
        samples = density_rows()[2]["samples"]
        self.assertEqual(plot.per_second(samples, "loads"), [(0.5, 600.0), (1.0, 600.0), (1.5, 600.0), (2.0, 600.0)])

    def test_memory_against_the_budget_rates_and_first_answers_by_percentile(self):
        self.draw()
        memory = parse(self.folder / "out" / "density-memory.svg")
        lines = memory.findall(f".//{SVG}polyline")
        self.assertEqual([len(line.get("points").split()) for line in lines], [5, 5, 5, 2])
        words = texts(memory)
        for label in ("RSS of the server", "held by the resident models, measured", "the budget (512 MiB)", "MiB", "seconds"):
            self.assertIn(label, words)
        self.assertIn("10,000 digits models: memory against the budget", words)
        churn = parse(self.folder / "out" / "density-churn.svg")
        self.assertEqual([len(line.get("points").split()) for line in churn.findall(f".//{SVG}polyline")], [4, 4, 4])
        first = parse(self.folder / "out" / "density-first-answers.svg")
        self.assertEqual([len(line.get("points").split()) for line in first.findall(f".//{SVG}polyline")], [4, 2])
        words = texts(first)
        self.assertIn("10,000 digits models (4 asked)", words)
        self.assertIn("100 digits-python models, warm (2 asked)", words)
        self.assertIn("Machine: test box", words)

    def test_a_labelled_runs_long_title_is_wrapped_within_the_figure(self):
        rows = density_rows()
        rows[2] = {**rows[2], "example": "digits-python", "label": "code read from disk after the 10,000-model run"}
        self.jsonl.write_text("".join(json.dumps(row) + "\n" for row in rows))
        self.draw()
        memory = parse(self.folder / "out" / "density-memory.svg")
        width = float(memory.get("width"))
        titles = [t for t in memory.iter(f"{SVG}text") if t.get("font-weight") == "600"]
        self.assertGreater(len(titles), 1, "the title takes two lines")
        for title in titles:
            self.assertLessEqual(float(title.get("x")) + plot.text_width(title.text, 17), width, title.text)
        self.assertEqual(len({float(t.get("y")) for t in titles}), len(titles), "one line under the other")

    def test_a_file_with_nothing_to_draw_is_named(self):
        self.jsonl.write_text(json.dumps({"kind": "storm", "example": "digits", "models": 1}) + "\n")
        with self.assertRaisesRegex(SystemExit, "no zipf run with samples and no first answers"):
            self.draw()
        self.jsonl.write_text('{"kind": "first"}\n')
        with self.assertRaisesRegex(SystemExit, "density.jsonl:1: no example, models"):
            self.draw()


class Scales(unittest.TestCase):
    def test_ticks(self):
        self.assertEqual(plot.linear_ticks(38000), [0, 10000, 20000, 30000, 40000])
        self.assertEqual(plot.log_ticks(0.5, 20), [0.5, 1, 2, 5, 10, 20])
        self.assertEqual(plot.log_ticks(1, 10000), [1, 10, 100, 1000, 10000])
        self.assertEqual(plot.nice_log_bounds(0.55, 13.7), (0.5, 20))
        values = (0.3123, 2.244, 28.44, 104.6, 1234.5)
        self.assertEqual([plot.three_digits(v) for v in values], ["0.312", "2.24", "28.4", "105", "1,234"])


if __name__ == "__main__":
    unittest.main()
