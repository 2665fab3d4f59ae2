#!/usr/bin/env python3
"""docs/performance.md's figures, drawn as SVG from the benchmarks' own output.

  --floor FILE       the JSON lines scripts/bench-floor.sh appends to (BENCH_OUTPUT=FILE):
                     throughput.svg (mean req/s of the rounds) and p99.svg (their median
                     p99) against concurrency, one line per server and protocol, whiskers
                     from the rounds' minimum to their maximum.
  --embeddings FILE  the JSON lines scripts/bench-embeddings.sh appends to (BENCH_OUTPUT=FILE):
                     embeddings.svg (sentences/s) and embeddings-p99.svg against the load's
                     concurrency, one line per served system; the in-process baselines
                     (batches of 32, no server) as flat lines at their rate.
  --density FILE     the JSON lines scripts/bench-density.sh appends to (BENCH_OUTPUT=FILE):
                     density-memory.svg (RSS and the resident models' measured memory
                     against the budget over a Zipf run), density-churn.svg (requests,
                     loads and evictions per second in it), density-first-answers.svg
                     (first answers of models on standby by percentile, per repository).
  --criterion DIR    criterion's folder (target/criterion): forward-<group>.svg for every
                     group whose name matches --groups, bars per parameter (batch size)
                     and function (backend) with their 95 % confidence interval, and
                     forward.svg, all those groups in one file (the page links that one,
                     so its link holds whatever the groups are called).

Python's standard library only: the SVG is written by hand, so drawing the figures needs
no package. scripts/bench-figures.sh measures and then runs this; its tests are
scripts/tests/test_plot_performance.py.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

# Okabe-Ito: told apart with every common colour-vision deficiency, and in grey print.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#56B4E9", "#CC79A7", "#000000", "#999999"]
SERVER_COLOURS = {"tensorplug": "#0072B2", "floor": "#D55E00", "baseline": "#009E73"}
SERVER_ORDER = ["tensorplug", "baseline", "floor"]
PROTOCOLS = {  # name in the data: (label, dash pattern, marker)
    "rest": ("REST", "", "circle"),
    "in-process": ("in process, batches of 32", "4 3", "diamond"),
    "grpc": ("gRPC", "7 4", "square"),
    "grpc-raw": ("gRPC raw", "2 3", "diamond"),
}
FONT = "system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif"
INK, MUTED, GRID, MINOR_GRID, AXIS = "#222222", "#666666", "#e4e4e4", "#f4f4f4", "#888888"
REGENERATE = "./scripts/bench-figures.sh"


# ---------------------------------------------------------------- the data


@dataclass(frozen=True)
class FloorPoint:
    """One concurrency of one server and protocol, over the rounds measured."""

    concurrency: int
    rounds: int
    rps_mean: float
    rps_min: float
    rps_max: float
    p99_ms_median: float
    p99_ms_min: float
    p99_ms_max: float
    errors: int


def read_json_lines(path: Path, keys: tuple[str, ...]) -> list[dict]:
    """A BENCH_OUTPUT file's rows, one JSON object a line, each with every one of `keys`."""
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise SystemExit(f"{path}:{number}: not JSON: {error}")
        missing = [key for key in keys if key not in row]
        if missing:
            raise SystemExit(f"{path}:{number}: no {', '.join(missing)}")
        rows.append(row)
    if not rows:
        raise SystemExit(f"{path}: no runs")
    return rows


def read_floor_runs(path: Path) -> list[dict]:
    """The runs of scripts/bench-floor.sh's BENCH_OUTPUT file."""
    return read_json_lines(path, ("server", "protocol", "concurrency", "rps", "p99_us"))


def summarise_floor(runs: list[dict]) -> dict[tuple[str, str], list[FloorPoint]]:
    """(server, protocol) -> its points by concurrency, in the order the charts list them:
    by protocol, then tensorplug, baseline, the floor, any other server."""
    by_point: dict[tuple[str, str, int], list[dict]] = {}
    for run in runs:
        by_point.setdefault((run["server"], run["protocol"], int(run["concurrency"])), []).append(run)
    series: dict[tuple[str, str], list[FloorPoint]] = {}
    for (server, protocol, concurrency), point_runs in sorted(by_point.items(), key=lambda kv: kv[0][2]):
        rps = [float(run["rps"]) for run in point_runs]
        p99 = [run["p99_us"] / 1000 for run in point_runs]
        series.setdefault((server, protocol), []).append(
            FloorPoint(
                concurrency=concurrency,
                rounds=len(point_runs),
                rps_mean=statistics.mean(rps),
                rps_min=min(rps),
                rps_max=max(rps),
                p99_ms_median=statistics.median(p99),
                p99_ms_min=min(p99),
                p99_ms_max=max(p99),
                errors=sum(int(run.get("errors", 0)) for run in point_runs),
            )
        )

    def order(key: tuple[str, str]) -> tuple:
        server, protocol = key
        protocol_rank = list(PROTOCOLS).index(protocol) if protocol in PROTOCOLS else len(PROTOCOLS)
        server_rank = SERVER_ORDER.index(server) if server in SERVER_ORDER else len(SERVER_ORDER)
        return (protocol_rank, protocol, server_rank, server)

    return {key: series[key] for key in sorted(series, key=order)}


@dataclass(frozen=True)
class Estimate:
    """One criterion benchmark: a function (backend) at a parameter (batch size), in µs."""

    function: str
    parameter: str
    us: float
    low_us: float
    high_us: float


def natural_key(text: str) -> tuple:
    """Sorts numbers numerically ("2" before "10", "predict_8" before "predict_32")."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text) if part)


def read_criterion(root: Path, pattern: str, estimate: str) -> dict[str, list[Estimate]]:
    """group -> its estimates, for the groups whose name matches `pattern` (a regular
    expression, searched): criterion 0.5's `<group>/<function>/<parameter>/new/`, whose
    benchmark.json names them as written (the folder names are sanitised) and whose
    estimates.json holds the times in ns."""
    if not root.is_dir():
        raise SystemExit(f"{root}: no such folder (run the benchmark first)")
    matcher = re.compile(pattern)
    groups: dict[str, list[Estimate]] = {}
    seen: set[str] = set()
    for named in sorted(root.glob("**/new/benchmark.json")):
        benchmark = json.loads(named.read_text())
        group = benchmark["group_id"]
        seen.add(group)
        if not matcher.search(group):
            continue
        estimates = json.loads((named.parent / "estimates.json").read_text())
        chosen = estimates.get(estimate) or estimates["mean"]
        interval = chosen["confidence_interval"]
        groups.setdefault(group, []).append(
            Estimate(
                # A benchmark outside a group is its own group, with one function.
                function=benchmark.get("function_id") or group,
                parameter=benchmark.get("value_str") or "",
                us=chosen["point_estimate"] / 1000,
                low_us=interval["lower_bound"] / 1000,
                high_us=interval["upper_bound"] / 1000,
            )
        )
    if not groups:
        found = ", ".join(sorted(seen)) or "none"
        raise SystemExit(f"{root}: no benchmark group matches {pattern!r} (groups found: {found})")
    return {group: groups[group] for group in sorted(groups, key=natural_key)}


# ---------------------------------------------------------------- numbers and scales


def text_width(text: str, size: float) -> float:
    """A generous guess at a sans-serif text's width in px (no font metrics here)."""
    return len(text) * size * 0.58


def plain(value: float) -> str:
    """A tick label: 0.5, 2, 1,000."""
    return f"{value:,.0f}" if value >= 1 and value == round(value) else f"{value:g}"


def thousands(value: float) -> str:
    """A tick label for requests/s: 0, 20k, 1.5M."""
    if value >= 1e6:
        return f"{value / 1e6:g}M"
    return f"{value / 1e3:g}k" if value >= 1e3 else f"{value:g}"


def three_digits(value: float) -> str:
    """A bar's value to three significant digits: 0.312, 2.24, 28.4, 105, 1,234."""
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.{2 - math.floor(math.log10(value))}f}" if value >= 0.001 else f"{value:.1e}"


def linear_ticks(high: float, count: int = 5) -> list[float]:
    """0 up to the first nice value at or above `high`, in about `count` steps."""
    if high <= 0:
        return [0.0, 1.0]
    raw = high / count
    decade = 10 ** math.floor(math.log10(raw))
    step = next(m * decade for m in (1, 2, 2.5, 5, 10) if m * decade >= raw)
    return [i * step for i in range(math.ceil(high / step - 1e-9) + 1)]


def log_ticks(low: float, high: float) -> list[float]:
    """1-2-5 ticks within [low, high], decades only when that spans more than 3 decades."""
    mantissas = (1,) if math.log10(high / low) > 3 else (1, 2, 5)
    ticks = [
        m * 10.0**k
        for k in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
        for m in mantissas
        if low * (1 - 1e-9) <= m * 10.0**k <= high * (1 + 1e-9)
    ]
    if len(ticks) < 2:  # a narrow range: every integer mantissa
        ticks = [
            m * 10.0**k
            for k in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
            for m in range(1, 10)
            if low * (1 - 1e-9) <= m * 10.0**k <= high * (1 + 1e-9)
        ]
    return ticks


def log_minor_ticks(low: float, high: float) -> list[float]:
    """Unlabelled 2..9 gridlines between the decades, where log_ticks labels decades only."""
    if math.log10(high / low) <= 3:
        return []
    return [
        m * 10.0**k
        for k in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
        for m in range(2, 10)
        if low < m * 10.0**k < high
    ]


def nice_log_bounds(low: float, high: float) -> tuple[float, float]:
    """[low, high] widened to the 1-2-5 values around them."""
    decades = range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 2)
    steps = [m * 10.0**k for k in decades for m in (1, 2, 5)]
    return max(s for s in steps if s <= low * (1 + 1e-9)), min(s for s in steps if s >= high * (1 - 1e-9))


@dataclass(frozen=True)
class Scale:
    """Maps data values in [low, high] to pixels in [start, end], linearly or in log10."""

    low: float
    high: float
    start: float
    end: float
    log: bool = False

    def __call__(self, value: float) -> float:
        f = math.log10 if self.log else float
        if self.log:  # a zero (a run that failed) sits on the axis rather than at -infinity
            value = max(value, self.low)
        return self.start + (f(value) - f(self.low)) / (f(self.high) - f(self.low)) * (self.end - self.start)


# ---------------------------------------------------------------- SVG


def number(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


class Canvas:
    """SVG elements at absolute pixel positions; `document` makes the file."""

    def __init__(self, width: float) -> None:
        self.width = width
        self.height = 0.0
        self.parts: list[str] = []

    def element(self, name: str, body: str | None = None, **attributes: object) -> None:
        attrs = "".join(
            f" {key.replace('_', '-')}={quoteattr(number(value) if isinstance(value, float) else str(value))}"
            for key, value in attributes.items()
            if value is not None and value != ""
        )
        self.parts.append(f"<{name}{attrs}/>" if body is None else f"<{name}{attrs}>{escape(body)}</{name}>")

    def line(self, x1: float, y1: float, x2: float, y2: float, stroke: str, width: float = 1, dash: str = "") -> None:
        self.element("line", x1=x1, y1=y1, x2=x2, y2=y2, stroke=stroke, stroke_width=width, stroke_dasharray=dash)

    def text(self, x: float, y: float, body: str, size: float = 12, anchor: str = "start", **extra: object) -> None:
        extra.setdefault("fill", INK)
        self.element("text", body, x=x, y=y, font_size=size, text_anchor=anchor, **extra)

    def marker(self, shape: str, x: float, y: float, colour: str) -> None:
        if shape == "square":
            self.element("rect", x=x - 3.5, y=y - 3.5, width=7.0, height=7.0, fill=colour)
        elif shape == "diamond":
            corners = ((x, y - 5), (x + 5, y), (x, y + 5), (x - 5, y))
            self.element("polygon", points=" ".join(f"{number(a)},{number(b)}" for a, b in corners), fill=colour)
        else:
            self.element("circle", cx=x, cy=y, r=4.0, fill=colour)

    def embed(self, other: Canvas, dy: float) -> None:
        """Another canvas's elements below this one's, `dy` px down."""
        self.parts.append(f'<g transform="translate(0,{number(dy)})">')
        self.parts.extend(other.parts)
        self.parts.append("</g>")

    def document(self, title: str) -> str:
        width, height = number(self.width), number(self.height)
        return "\n".join(
            [
                '<?xml version="1.0" encoding="UTF-8"?>',
                f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
                f'viewBox="0 0 {width} {height}" font-family={quoteattr(FONT)}>',
                f"<title>{escape(title)}</title>",
                f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
                *self.parts,
                "</svg>",
                "",
            ]
        )


@dataclass(frozen=True)
class LegendEntry:
    label: str
    colour: str
    dash: str = ""
    marker: str | None = None  # None: a filled swatch (bars); "": a line without a marker


LEFT, RIGHT = 78.0, 24.0


def heading(canvas: Canvas, title: str, subtitle: str) -> float:
    """The title and subtitle, each wrapped to the canvas; returns the y below them."""
    titles = wrap(title, canvas.width - LEFT - RIGHT, 17)
    for i, line in enumerate(titles):
        canvas.text(LEFT, 28 + 22 * i, line, size=17, font_weight="600")
    top = 48 + 22 * (len(titles) - 1)
    subtitles = wrap(subtitle, canvas.width - LEFT - RIGHT, 12)
    for i, line in enumerate(subtitles):
        canvas.text(LEFT, top + 16 * i, line, size=12, fill=MUTED)
    return top + 16 * len(subtitles) + 4


def legend(canvas: Canvas, entries: list[LegendEntry], top: float) -> float:
    """The entries in rows from the left; returns the y below them."""
    x, y = LEFT, top + 10
    for entry in entries:
        width = 34 + text_width(entry.label, 12) + 18
        if x + width > canvas.width - RIGHT and x > LEFT:
            x, y = LEFT, y + 20
        if entry.marker is None:
            canvas.element("rect", x=x + 6, y=y - 6, width=16.0, height=12.0, fill=entry.colour)
        else:
            canvas.line(x, y, x + 28, y, entry.colour, 2, entry.dash)
            if entry.marker:
                canvas.marker(entry.marker, x + 14, y, entry.colour)
        canvas.text(x + 34, y + 4, entry.label, size=12)
        x += width
    return y + 16


def wrap(text: str, width_px: float, size: float) -> list[str]:
    return textwrap.wrap(text, max(20, int(width_px / (size * 0.58))), break_on_hyphens=False) or [""]


def y_axis(canvas: Canvas, scale: Scale, ticks: list[float], label: str, left: float, right: float, fmt) -> None:
    """Gridlines and labels at `ticks`, and the axis title turned along the axis."""
    for tick in log_minor_ticks(scale.low, scale.high) if scale.log else []:
        canvas.line(left, scale(tick), right, scale(tick), MINOR_GRID)
    for tick in ticks:
        y = scale(tick)
        canvas.line(left, y, right, y, GRID)
        canvas.text(left - 8, y + 4, fmt(tick), size=11, anchor="end", fill=MUTED)
    middle = (scale.start + scale.end) / 2
    canvas.text(18, middle, label, size=12, anchor="middle", transform=f"rotate(-90 18 {number(middle)})")


def frame(canvas: Canvas, left: float, top: float, right: float, bottom: float) -> None:
    canvas.line(left, bottom, right, bottom, AXIS)
    canvas.line(left, top, left, bottom, AXIS)


def footer(canvas: Canvas, lines: list[str], top: float) -> None:
    """The machine and the command, in small print at the bottom; sets the height."""
    y = top + 8
    canvas.line(LEFT, y, canvas.width - RIGHT, y, GRID)
    for line in lines:
        for part in wrap(line, canvas.width - LEFT - RIGHT, 11):
            y += 15
            canvas.text(LEFT, y, part, size=11, fill=MUTED)
    canvas.height = y + 12


# ---------------------------------------------------------------- the charts


PLOT_HEIGHT = 300.0


def concurrency_chart(
    series: dict[tuple[str, str], list[FloorPoint]],
    title: str,
    subtitle: str,
    y_label: str,
    value,  # FloorPoint -> (value, low, high)
    log_y: bool,
    width: float = 760,
) -> Canvas:
    """One line a server and protocol against concurrency (log x)."""
    canvas = Canvas(width)
    top = heading(canvas, title, subtitle)
    entries, lines = [], []
    # Servers without a colour of their own take the palette's others, in turn.
    spare = [c for c in PALETTE if c not in SERVER_COLOURS.values()]
    others: dict[str, str] = {}
    for server, _ in series:
        if server not in SERVER_COLOURS and server not in others:
            others[server] = spare[len(others) % len(spare)]
    for (server, protocol), points in series.items():
        name, dash, marker = PROTOCOLS.get(protocol, (protocol, "4 2 1 2", "circle"))
        colour = SERVER_COLOURS.get(server) or others[server]
        errors = sum(point.errors for point in points)
        label = f"{server} {name}" + (f" ({errors} errors)" if errors else "")
        entries.append(LegendEntry(label, colour, dash, marker))
        lines.append((colour, dash, marker, points))
    top = legend(canvas, entries, top) + 8

    left, right, bottom = LEFT, width - RIGHT, top + PLOT_HEIGHT
    concurrencies = sorted({point.concurrency for points in series.values() for point in points})
    x = Scale(concurrencies[0] / 1.4, concurrencies[-1] * 1.4, left, right, log=True)
    lows = [value(point)[1] for points in series.values() for point in points]
    highs = [value(point)[2] for points in series.values() for point in points]
    if log_y:
        low, high = nice_log_bounds(min((v for v in lows if v > 0), default=0.01), max(max(highs), 0.02))
        ticks = log_ticks(low, high)
        y = Scale(low, high, bottom, top, log=True)
    else:
        ticks = linear_ticks(max(highs) * 1.02)
        y = Scale(0, ticks[-1], bottom, top)
    y_axis(canvas, y, ticks, y_label, left, right, plain if log_y else thousands)
    for c in concurrencies:
        canvas.line(x(c), top, x(c), bottom, GRID)
        canvas.text(x(c), bottom + 18, str(c), size=11, anchor="middle", fill=MUTED)
    frame(canvas, left, top, right, bottom)
    canvas.text((left + right) / 2, bottom + 40, "concurrency (connections, log scale)", size=12, anchor="middle")

    for colour, dash, marker, points in lines:
        path = " ".join(f"{number(x(p.concurrency))},{number(y(value(p)[0]))}" for p in points)
        canvas.element("polyline", points=path, fill="none", stroke=colour, stroke_width=2.0, stroke_dasharray=dash)
        for point in points:
            middle, low, high = value(point)
            px = x(point.concurrency)
            if high > low:  # whiskers: the spread of the rounds
                canvas.line(px, y(low), px, y(high), colour, 1.2)
                canvas.line(px - 4, y(low), px + 4, y(low), colour, 1.2)
                canvas.line(px - 4, y(high), px + 4, y(high), colour, 1.2)
            canvas.marker(marker, px, y(middle), colour)
    canvas.height = bottom + 48
    return canvas


def rounds_text(series: dict[tuple[str, str], list[FloorPoint]]) -> str:
    counts = sorted({point.rounds for points in series.values() for point in points})
    return f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"


@dataclass(frozen=True)
class Line:
    """A series of (x, y) points drawn as a line without markers."""

    label: str
    colour: str
    points: list[tuple[float, float]]
    dash: str = ""


def line_chart(
    title: str, subtitle: str, lines: list[Line], x_label: str, y_label: str, log_y: bool = False, width: float = 760
) -> Canvas:
    """Lines over a linear x axis from 0 (time, a percentile), y linear from 0 or log."""
    canvas = Canvas(width)
    top = heading(canvas, title, subtitle)
    top = legend(canvas, [LegendEntry(line.label, line.colour, line.dash, "") for line in lines], top) + 8
    left, right, bottom = LEFT, width - RIGHT, top + PLOT_HEIGHT
    xs = [x for line in lines for x, _ in line.points]
    ys = [y for line in lines for _, y in line.points]
    if not xs:
        raise SystemExit(f"{title}: nothing to draw")
    # The axis ends with the data (a run of 62 s is not drawn to 80).
    x_high = max(max(xs), 1e-9)
    x_ticks = [tick for tick in linear_ticks(x_high, 4) if tick <= x_high * (1 + 1e-9)]
    x = Scale(0, x_high, left, right)
    if log_y:
        low, high = nice_log_bounds(min((v for v in ys if v > 0), default=0.01), max(max(ys), 0.02))
        y_ticks = log_ticks(low, high)
        y = Scale(low, high, bottom, top, log=True)
    else:
        y_ticks = linear_ticks(max(max(ys), 1e-9) * 1.02)
        y = Scale(0, y_ticks[-1], bottom, top)
    y_axis(canvas, y, y_ticks, y_label, left, right, plain)
    for tick in x_ticks:
        canvas.line(x(tick), top, x(tick), bottom, GRID)
        canvas.text(x(tick), bottom + 18, plain(tick), size=11, anchor="middle", fill=MUTED)
    frame(canvas, left, top, right, bottom)
    canvas.text((left + right) / 2, bottom + 40, x_label, size=12, anchor="middle")
    for line in lines:
        path = " ".join(f"{number(x(px))},{number(y(py))}" for px, py in line.points)
        canvas.element(
            "polyline", points=path, fill="none", stroke=line.colour, stroke_width=2.0, stroke_dasharray=line.dash
        )
    canvas.height = bottom + 48
    return canvas


# file, title, what a point is, the y axis, a point's value with its spread, log y.
FLOOR_CHARTS = [
    (
        "throughput.svg",
        "Throughput against concurrency",
        "mean requests/s",
        "requests per second",
        lambda p: (p.rps_mean, p.rps_min, p.rps_max),
        False,
    ),
    (
        "p99.svg",
        "p99 latency against concurrency",
        "median 99th-percentile latency",
        "p99 latency (ms, log scale)",
        lambda p: (p.p99_ms_median, p.p99_ms_min, p.p99_ms_max),
        True,
    ),
]


BAR_WIDTH, BAR_GAP, CLUSTER_GAP = 34.0, 3.0, 28.0


def bar_chart_width(estimates: list[Estimate]) -> float:
    """Wide enough for every bar at BAR_WIDTH."""
    functions, parameters = {e.function for e in estimates}, {e.parameter for e in estimates}
    return LEFT + RIGHT + max(600.0, len(parameters) * (len(functions) * (BAR_WIDTH + BAR_GAP) + CLUSTER_GAP))


def bar_chart(group: str, estimates: list[Estimate], colours: dict[str, str], estimate: str, width: float) -> Canvas:
    """Bars clustered by parameter, one a function, on a log10 scale in µs, each with its
    value above it and its confidence interval as a whisker."""
    functions = sorted({e.function for e in estimates}, key=natural_key)
    parameters = sorted({e.parameter for e in estimates}, key=natural_key)
    by_key = {(e.function, e.parameter): e for e in estimates}
    cluster = len(functions) * (BAR_WIDTH + BAR_GAP) - BAR_GAP
    canvas = Canvas(width)
    top = heading(
        canvas,
        f"Forward pass: {group}",
        f"criterion's {estimate} per call in µs (log scale), its 95 % confidence interval as a whisker.",
    )
    top = legend(canvas, [LegendEntry(f, colours[f]) for f in functions], top) + 8

    left, right, bottom = LEFT, width - RIGHT, top + PLOT_HEIGHT
    labels = {key: three_digits(e.us) for key, e in by_key.items()}
    turned = any(text_width(label, 10) > BAR_WIDTH + BAR_GAP for label in labels.values())
    headroom = 6 + (max(text_width(label, 10) for label in labels.values()) if turned else 12)
    low_decade = math.floor(math.log10(min(e.low_us for e in estimates)) - 0.15)
    high_data = math.log10(max(e.high_us for e in estimates))
    # The top of the scale leaves `headroom` px above the highest whisker for its label.
    high_decade = low_decade + (high_data - low_decade) * PLOT_HEIGHT / (PLOT_HEIGHT - headroom)
    y = Scale(10.0**low_decade, 10.0**high_decade, bottom, top, log=True)
    y_axis(canvas, y, log_ticks(10.0**low_decade, 10.0**high_decade), "µs per call (log scale)", left, right, plain)

    span = (right - left) / len(parameters)
    for p_index, parameter in enumerate(parameters):
        start = left + p_index * span + (span - cluster) / 2
        canvas.text(left + (p_index + 0.5) * span, bottom + 18, parameter, size=12, anchor="middle")
        for f_index, function in enumerate(functions):
            found = by_key.get((function, parameter))
            if found is None:  # not measured here: an empty slot keeps the order of the bars
                continue
            x0 = start + f_index * (BAR_WIDTH + BAR_GAP)
            middle = x0 + BAR_WIDTH / 2
            canvas.element(
                "rect", x=x0, y=y(found.us), width=BAR_WIDTH, height=bottom - y(found.us), fill=colours[function]
            )
            canvas.line(middle, y(found.low_us), middle, y(found.high_us), INK, 1)
            canvas.line(middle - 4, y(found.high_us), middle + 4, y(found.high_us), INK, 1)
            label_y = min(y(found.us), y(found.high_us)) - (6 if turned else 4)
            label = labels[(function, parameter)]
            if turned:
                transform = f"rotate(-90 {number(middle + 3.5)} {number(label_y)})"
                canvas.text(middle + 3.5, label_y, label, size=10, transform=transform)
            else:
                canvas.text(middle, label_y, label, size=10, anchor="middle")
    frame(canvas, left, top, right, bottom)
    x_label = "batch size" if all(p.isdigit() for p in parameters) else "benchmark parameter"
    canvas.text((left + right) / 2, bottom + 40, x_label, size=12, anchor="middle")
    canvas.height = bottom + 48
    return canvas


# ---------------------------------------------------------------- the files


def write(path: Path, canvas: Canvas, title: str, footer_lines: list[str]) -> None:
    footer(canvas, footer_lines, canvas.height)
    path.write_text(canvas.document(title))
    print(path)


def floor_figures(path: Path, out: Path, machine: str, command: str, servers: list[str] | None = None) -> None:
    runs = read_floor_runs(path)
    if servers:
        runs = [run for run in runs if run["server"] in servers]
        if not runs:
            raise SystemExit(f"{path}: no runs of {', '.join(servers)}")
    series = summarise_floor(runs)
    lines = [f"Machine: {machine}", f"Data: {command} — regenerate: {REGENERATE}"]
    for name, title, point, y_label, value, log_y in FLOOR_CHARTS:
        subtitle = (
            "tensorplug and the floor (tools/floor), the digits model over loopback, closed-loop load by "
            f"tools/loadgen; points: the {point} of {rounds_text(series)} rounds, "
            "whiskers: their minimum and maximum."
        )
        write(out / name, concurrency_chart(series, title, subtitle, y_label, value, log_y), title, lines)


def embeddings_series(path: Path) -> dict[tuple[str, str], list[FloorPoint]]:
    """scripts/bench-embeddings.sh's rows as (system, protocol) -> points: a served system's
    runs by the load's concurrency (over REST), an in-process baseline's batch-of-32 rate
    repeated at each of those concurrencies (it has no load generator: a flat line)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    served = [row for row in rows if "concurrency" in row and "rps" in row]
    if not served:
        raise SystemExit(f"{path}: no served system's runs (rows with concurrency and rps)")
    concurrencies = sorted({int(row["concurrency"]) for row in served})
    runs = [
        {"server": row["system"], "protocol": "rest", "concurrency": row["concurrency"], "rps": row["rps"],
         "p99_us": row["p99_us"], "errors": row.get("errors", 0)}
        for row in served
    ]
    for row in rows:
        if row.get("mode") == "batch32" and "sentences_per_s" in row:
            # A batch's p99 spread over its 32 sentences: the latency a sentence sees when it
            # waits for its batch to be formed and run.
            runs.extend(
                {"server": row["system"], "protocol": "in-process", "concurrency": c,
                 "rps": row["sentences_per_s"], "p99_us": row["p99_us"], "errors": 0}
                for c in concurrencies
            )
    return summarise_floor(runs)


EMBEDDINGS_CHARTS = [
    ("embeddings.svg", "Sentence embeddings against concurrency", "sentences per second", False,
     lambda p: (p.rps_mean, p.rps_min, p.rps_max)),
    ("embeddings-p99.svg", "Sentence embeddings: p99 latency", "p99 latency (ms, log scale)", True,
     lambda p: (p.p99_ms_median, p.p99_ms_min, p.p99_ms_max)),
]


def embeddings_figures(path: Path, out: Path, machine: str, command: str) -> None:
    series = embeddings_series(path)
    lines = [f"Machine: {machine}", f"Data: {command} — regenerate: ./scripts/bench-embeddings.sh"]
    subtitle = (
        "all-MiniLM-L6-v2 on the same weights: servers under closed-loop load by tools/loadgen, one "
        "realistic sentence a request; in-process baselines (no server) as flat lines at their rate "
        "in batches of 32 (their p99: a whole batch's)."
    )
    for name, title, y_label, log_y, value in EMBEDDINGS_CHARTS:
        write(out / name, concurrency_chart(series, title, subtitle, y_label, value, log_y), title, lines)


def forward_figures(root: Path, pattern: str, estimate: str, out: Path, machine: str, command: str) -> None:
    groups = read_criterion(root, pattern, estimate)
    # One colour a function across every chart: a backend looks the same everywhere.
    functions = sorted({e.function for estimates in groups.values() for e in estimates}, key=natural_key)
    colours = {f: PALETTE[i % len(PALETTE)] for i, f in enumerate(functions)}
    lines = [f"Machine: {machine}", f"Data: {command} — regenerate: {REGENERATE}"]
    # One width for all, so that the charts stacked in forward.svg line up.
    width = max(bar_chart_width(estimates) for estimates in groups.values())
    charts = {group: bar_chart(group, estimates, colours, estimate, width) for group, estimates in groups.items()}
    written = set()
    for group, chart in charts.items():
        name = "forward-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", group) + ".svg"
        single = Canvas(chart.width)
        single.embed(chart, 0)
        single.height = chart.height
        write(out / name, single, f"Forward pass: {group}", lines)
        written.add(name)
    combined = Canvas(width)
    for chart in charts.values():
        combined.embed(chart, combined.height)
        combined.height += chart.height
    write(out / "forward.svg", combined, "Forward pass per backend and batch size", lines)
    # A group that is gone leaves no figure of an old run behind.
    for stale in out.glob("forward-*.svg"):
        if stale.name not in written:
            stale.unlink()


def read_density(path: Path) -> list[dict]:
    """scripts/bench-density.py's BENCH_OUTPUT rows: kind "first" (first answers of models on
    standby), "storm" and "zipf" (with its timeline of samples)."""
    return read_json_lines(path, ("kind", "example", "models"))


def repository_name(row: dict) -> str:
    """"10,000 digits models", with the run's label (BENCH_LABEL) if it has one."""
    name = f"{row['models']:,} {row['example']} models"
    return f"{name}, {row['label']}" if row.get("label") else name


def per_second(samples: list[dict], key: str) -> list[tuple[float, float]]:
    """A counter's rate between consecutive samples, at the later one's time."""
    return [
        (later["t"], (later[key] - earlier[key]) / (later["t"] - earlier["t"]))
        for earlier, later in zip(samples, samples[1:])
        if later["t"] > earlier["t"]
    ]


def memory_chart(run: dict) -> Canvas:
    samples = run["samples"]
    lines = [
        Line("RSS of the server", PALETTE[3], [(s["t"], s["rss_mib"]) for s in samples]),
        Line("held by the resident models, measured", PALETTE[0], [(s["t"], s["held_mib"]) for s in samples]),
    ]
    if all("reserved_mib" in s and "releasing_mib" in s for s in samples):
        counted = [(s["t"], s["held_mib"] + s["reserved_mib"] + s["releasing_mib"]) for s in samples]
        lines.append(Line("counted against the budget (+ reserved by loads, + evicted not yet freed)", PALETTE[2], counted, "3 2"))
    budget = [(0, run["budget_mib"]), (samples[-1]["t"], run["budget_mib"])]
    lines.append(Line(f"the budget ({run['budget_mib']:,} MiB)", INK, budget, "6 4"))
    resident = [s["resident"] for s in samples]
    subtitle = (
        f"Zipf (s = 1.0) over every model at c = {run['concurrency']}, on demand under --memory-budget-mib "
        f"{run['budget_mib']}: {run['rps']:,.0f} requests/s, {run['failed']} failed; {min(resident):,.0f}–"
        f"{max(resident):,.0f} models resident. Sampled from /metrics and /proc every {run['every_s']:g} s."
    )
    return line_chart(f"{repository_name(run)}: memory against the budget", subtitle, lines, "seconds", "MiB")


def churn_chart(run: dict) -> Canvas:
    samples = run["samples"]
    lines = [
        Line("requests answered", PALETTE[0], per_second(samples, "requests")),
        Line("loads (a request found its model on standby)", PALETTE[1], per_second(samples, "loads")),
        Line("evictions", PALETTE[2], per_second(samples, "evictions"), "4 3"),
    ]
    subtitle = (
        f"The same run: what Zipf traffic over {run['models']:,} models at c = {run['concurrency']} asks of the "
        f"loads and the budget, each a rate between samples (log scale)."
    )
    return line_chart(f"{repository_name(run)}: requests, loads and evictions", subtitle, lines, "seconds", "per second (log scale)", log_y=True)


def first_answers_chart(runs: list[dict]) -> Canvas:
    lines = []
    for index, run in enumerate(runs):
        latencies = sorted(run["latencies_ms"])
        count = len(latencies)
        points = [(100 * (i + 1) / count, value) for i, value in enumerate(latencies)]
        lines.append(Line(f"{repository_name(run)} ({count} asked)", PALETTE[index % len(PALETTE)], points))
    subtitle = (
        "Models on standby, cache filled by tensorplug compile, asked once each one after the other: arrival to "
        "answer at the client, one keep-alive connection; the load, the first instance and the answer."
    )
    return line_chart(
        "First answer of a model on standby", subtitle, lines, "percentile of the first answers", "ms (log scale)", log_y=True
    )


def density_figures(path: Path, out: Path, machine: str, command: str) -> None:
    rows = read_density(path)
    lines = [f"Machine: {machine}", f"Data: {command}"]
    zipf = [row for row in rows if row["kind"] == "zipf" and len(row.get("samples", [])) >= 2]
    first = [row for row in rows if row["kind"] == "first" and row.get("latencies_ms")]
    if not zipf and not first:
        raise SystemExit(f"{path}: no zipf run with samples and no first answers")
    for name, chart, title in (("density-memory.svg", memory_chart, "memory"), ("density-churn.svg", churn_chart, "churn")):
        if zipf:
            combined = Canvas(760)
            for run in zipf:
                part = chart(run)
                combined.embed(part, combined.height)
                combined.height += part.height
            write(out / name, combined, f"Many models: {title}", lines)
    if first:
        write(out / "density-first-answers.svg", first_answers_chart(first), "First answers", lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    arg = parser.add_argument
    arg("--floor", type=Path, help="scripts/bench-floor.sh's BENCH_OUTPUT file (JSON lines)")
    arg("--embeddings", type=Path, help="scripts/bench-embeddings.sh's BENCH_OUTPUT file (JSON lines)")
    arg("--embeddings-command", default="scripts/bench-embeddings.sh with BENCH_OUTPUT", help="how the --embeddings data was made")
    arg("--density", type=Path, help="scripts/bench-density.py's BENCH_OUTPUT file (JSON lines)")
    arg("--density-command", default="scripts/bench-density.sh with BENCH_OUTPUT", help="how the --density data was made")
    arg("--criterion", type=Path, help="criterion's folder, e.g. target/criterion")
    arg("--groups", default="forward", help="regular expression the groups' names must match (default: forward)")
    arg("--estimate", default="mean", choices=["mean", "median", "slope"], help="criterion's estimate (default: mean; slope, where there is none: mean)")
    arg("--out", type=Path, required=True, help="folder the SVG files are written to")
    arg("--machine", required=True, help="the machine the data came from, printed in every figure's footer")
    arg("--servers", help="comma-separated servers of the --floor data to draw (default: all; e.g. tensorplug,floor)")
    arg("--floor-command", default="scripts/bench-floor.sh with BENCH_OUTPUT", help="how the --floor data was made")
    forward = "cargo bench -p tensorplug --bench forward"
    arg("--criterion-command", default=forward, help="how the criterion data was made")
    args = parser.parse_args(argv)
    if args.floor is None and args.criterion is None and args.embeddings is None and args.density is None:
        parser.error("nothing to draw: give --floor, --criterion, --embeddings, --density or several")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.floor is not None:
        servers = [name for name in (args.servers or "").split(",") if name]
        floor_figures(args.floor, args.out, args.machine, args.floor_command, servers)
    if args.embeddings is not None:
        embeddings_figures(args.embeddings, args.out, args.machine, args.embeddings_command)
    if args.density is not None:
        density_figures(args.density, args.out, args.machine, args.density_command)
    if args.criterion is not None:
        forward_figures(args.criterion, args.groups, args.estimate, args.out, args.machine, args.criterion_command)


if __name__ == "__main__":
    sys.exit(main())
