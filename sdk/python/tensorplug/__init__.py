"""tensorplug's Python SDK: write a plugin stage as a class, see tensors as typed views.

A plugin module built by `componentize-py` defines a class named `WitWorld`. Deriving it
from `Predictor`, `Preprocessor` or `Postprocessor` turns the world's exports into a few
methods with Python types:

- `setup(parameters)`: once per instance, with `model.toml`'s `[parameters]` as a dict of
  strings. Read weights here, not at module level: module-level code runs when the
  component is built, not where it is served. Any exception keeps the model from loading,
  with its message.
- `predict_batch(batch, failures)` (predict): `batch` maps input names to `TensorView`s
  with the batch dimension first; return the outputs (`output(...)` builders, one row per
  item) and fail single items with `failures.fail(index, status, message)`. Raising
  `ItemError` fails the whole batch with that status.
- `process_item(item)` (pre- and postprocess): one item's tensors in, a list of outputs
  back; raising `ItemError` fails that item alone.

Any other exception is a bug in the plugin: it is logged with its traceback and answered
as a 500 that fails only the item that raised it (in predict the batch fails with 500 and
the host retries its halves until only that item fails), so neighbours never see it.

Only `wit_world.imports` is used, which every world's bindings have, so one SDK serves
all three worlds.
"""

from __future__ import annotations

import struct
import sys
import traceback
from typing import Iterable, Iterator, Mapping, Sequence, Union

from componentize_py_types import Err, Ok
from wit_world.imports import graph as _nn_graph
from wit_world.imports import log as _log
from wit_world.imports import metadata as _metadata
from wit_world.imports import metrics as _metrics
from wit_world.imports import tensor as _nn_tensor
from wit_world.imports import tensorplug_plugin_types as _types

__all__ = [
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
    "FP16", "FP32", "FP64", "BYTES", "MODEL_DIR",
    "ItemError", "TensorView", "Item", "Output", "output", "Failures",
    "Predictor", "Preprocessor", "Postprocessor",
    "trace", "debug", "info", "warn", "error",
    "counter_add", "gauge_set", "histogram_observe", "declare",
    "Graph", "graph", "read_model_file",
]

Datatype = _types.Datatype
BOOL, UINT8, UINT16, UINT32, UINT64 = (Datatype.BOOL, Datatype.UINT8, Datatype.UINT16,
                                       Datatype.UINT32, Datatype.UINT64)
INT8, INT16, INT32, INT64 = Datatype.INT8, Datatype.INT16, Datatype.INT32, Datatype.INT64
FP16, FP32, FP64, BYTES = Datatype.FP16, Datatype.FP32, Datatype.FP64, Datatype.BYTES

#: Where the host mounts the model folder, read-only.
MODEL_DIR = "/model"

# The `struct`/`memoryview` format of each fixed-size datatype (the wire is little-endian,
# as WebAssembly is). BYTES has none: its elements are length-prefixed.
_FORMATS = {
    BOOL: "?", UINT8: "B", UINT16: "H", UINT32: "I", UINT64: "Q",
    INT8: "b", INT16: "h", INT32: "i", INT64: "q",
    FP16: "e", FP32: "f", FP64: "d",
}

if sys.byteorder != "little":  # pragma: no cover - WebAssembly is little-endian
    raise ImportError("tensorplug's tensor views assume a little-endian machine")


class ItemError(Exception):
    """A refusal with an HTTP-style status: 4xx blames the input (400 when in doubt, 422
    for well-formed but unacceptable values), 5xx the plugin."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    def to_wit(self) -> _types.ItemError:
        return _types.ItemError(self.status, self.message)


def _count(shape: Sequence[int]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def _split_bytes(data: bytes, name: str) -> list[bytes]:
    """The elements of a BYTES tensor: each a 4-byte little-endian length, then the bytes."""
    elements, at = [], 0
    while at < len(data):
        if at + 4 > len(data):
            raise ItemError(400, f"{name}: a BYTES element's length is cut short")
        (length,) = struct.unpack_from("<I", data, at)
        at += 4
        if at + length > len(data):
            raise ItemError(400, f"{name}: a BYTES element is longer than the data")
        elements.append(bytes(data[at:at + length]))
        at += length
    return elements


def _join_bytes(elements: Iterable[Union[bytes, str]]) -> bytes:
    out = bytearray()
    for element in elements:
        raw = element.encode() if isinstance(element, str) else bytes(element)
        out += struct.pack("<I", len(raw))
        out += raw
    return bytes(out)


class TensorView:
    """A read-only, typed view of a tensor the host passed in (no copy).

    `values` is a flat `memoryview` of the elements in the datatype's native format
    (`view.values[i]` is a Python float for FP32), or a list of `bytes` for BYTES.
    """

    def __init__(self, tensor: _types.Tensor) -> None:
        self._tensor = tensor
        self.name: str = tensor.name
        self.datatype: Datatype = tensor.datatype
        self.shape: tuple[int, ...] = tuple(tensor.shape)
        if self.datatype == BYTES:
            self.values = _split_bytes(tensor.data, self.name)
        else:
            raw = memoryview(tensor.data)
            fmt = _FORMATS[self.datatype]
            if len(raw) != _count(self.shape) * struct.calcsize(fmt):
                raise ItemError(400, f"{self.name}: {len(raw)} bytes of data do not fill "
                                     f"shape {list(self.shape)} of {self.datatype.name}")
            self.values = raw.cast("B").cast(fmt)
        if len(self.values) != _count(self.shape):
            raise ItemError(400, f"{self.name}: {len(self.values)} elements for shape "
                                 f"{list(self.shape)}")

    def expect(self, datatype: Datatype, shape: Sequence[int]) -> "TensorView":
        """Checks the datatype and the shape (-1: any size), else raises a 400."""
        if self.datatype != datatype:
            raise ItemError(400, f"{self.name}: expected {datatype.name}, got {self.datatype.name}")
        if len(shape) != len(self.shape) or any(
                want not in (-1, got) for want, got in zip(shape, self.shape)):
            raise ItemError(400, f"{self.name}: expected shape {list(shape)}, got {list(self.shape)}")
        return self

    def __len__(self) -> int:
        """The size of the first dimension (the batch size of a batched tensor)."""
        return self.shape[0] if self.shape else 1

    def row(self, index: int):
        """Row `index` along the first dimension, as a view of the same elements."""
        width = _count(self.shape[1:])
        return self.values[index * width:(index + 1) * width]

    def rows(self) -> Iterator:
        """Every row along the first dimension (one per item of a batch)."""
        return (self.row(i) for i in range(len(self)))

    def to_wit(self) -> _types.Tensor:
        """The tensor as the host takes it back (e.g. to pass an input through)."""
        return self._tensor


class Item(Mapping[str, TensorView]):
    """One item's (or one batch's) tensors by name; a missing name is the input's fault."""

    def __init__(self, tensors: Iterable[_types.Tensor]) -> None:
        self._tensors = {t.name: t for t in tensors}
        self._views: dict[str, TensorView] = {}

    def __getitem__(self, name: str) -> TensorView:
        if name not in self._tensors:
            raise ItemError(400, f"missing input tensor '{name}'")
        if name not in self._views:
            self._views[name] = TensorView(self._tensors[name])
        return self._views[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def get(self, name: str, datatype: Datatype | None = None,  # type: ignore[override]
            shape: Sequence[int] | None = None) -> TensorView:
        """The tensor `name`, checked against `datatype` and `shape` when given."""
        view = self[name]
        if datatype is not None:
            view.expect(datatype, shape if shape is not None else [-1] * len(view.shape))
        return view


class Output:
    """A tensor being built: `values` is a writable, typed, zero-filled `memoryview`."""

    def __init__(self, name: str, datatype: Datatype, shape: Sequence[int]) -> None:
        self.name, self.datatype, self.shape = name, datatype, tuple(int(s) for s in shape)
        if datatype == BYTES:
            self.values: list = [b""] * _count(self.shape)
            self._buffer = None
        else:
            fmt = _FORMATS[datatype]
            self._buffer = bytearray(_count(self.shape) * struct.calcsize(fmt))
            self.values = memoryview(self._buffer).cast(fmt)

    def row(self, index: int):
        """Row `index` along the first dimension, writable in place."""
        width = _count(self.shape[1:])
        return self.values[index * width:(index + 1) * width]

    def to_wit(self) -> _types.Tensor:
        data = _join_bytes(self.values) if self._buffer is None else bytes(self._buffer)
        return _types.Tensor(self.name, self.datatype, list(self.shape), data)


def output(name: str, datatype: Datatype, shape: Sequence[int], values=None) -> Output:
    """A new output tensor, zero-filled, or holding `values` (any iterable of numbers, or
    of bytes/str for BYTES), whose count must match the shape."""
    built = Output(name, datatype, shape)
    if values is not None:
        values = list(values)
        if len(values) != len(built.values):
            raise ValueError(f"{name}: {len(values)} values for shape {list(shape)}")
        if built._buffer is None:
            built.values = values
        else:
            built.values[:] = _packed(values, datatype)
    return built


def _packed(values: list, datatype: Datatype) -> memoryview:
    fmt = _FORMATS[datatype]
    return memoryview(struct.pack(f"<{len(values)}{fmt}", *values)).cast(fmt)


class Failures:
    """The items of a batch that failed alone (their output rows are ignored)."""

    def __init__(self) -> None:
        self._failures: list[_types.ItemFailure] = []

    def fail(self, index: int, status: int, message: str) -> None:
        self._failures.append(_types.ItemFailure(index, _types.ItemError(status, message)))

    def __len__(self) -> int:
        return len(self._failures)

    def to_wit(self) -> list[_types.ItemFailure]:
        return list(self._failures)


def _wit_tensor(tensor: Union[Output, TensorView, _types.Tensor]) -> _types.Tensor:
    return tensor.to_wit() if isinstance(tensor, (Output, TensorView)) else tensor


# Longest exception message an answer and the log carry, in characters: a plugin's
# exception may hold megabytes, and copying it while formatting ran the plugin out of its
# memory (a trap) instead of failing the item.
_MAX_MESSAGE = 4096


def _cut(text: str) -> str:
    if len(text) <= _MAX_MESSAGE:
        return text
    return f"{text[:_MAX_MESSAGE]}... ({len(text) - _MAX_MESSAGE} more characters)"


def _refusal(failure: Exception) -> _types.ItemError:
    """An `ItemError` as it is (its message cut); any other exception, a plugin bug, as a
    logged 500."""
    if isinstance(failure, ItemError):
        return _types.ItemError(failure.status, _cut(failure.message))
    try:
        text = str(failure)
    except Exception:  # an exception whose __str__ raises
        text = "<the exception's message could not be read>"
    message = _cut(f"{type(failure).__name__}: {text}")
    del text
    # The frames alone, and the message once, cut: never the whole message again.
    frames = "".join(traceback.format_tb(failure.__traceback__))
    error(f"Traceback (most recent call last):\n{frames}{message}")
    return _types.ItemError(500, message)


class _Stage:
    """What the three worlds share: `init` calling `setup` with the parameters as a dict."""

    def setup(self, parameters: dict[str, str]) -> None:
        """Called once per instance before any other call; override to load weights."""

    def init(self, parameters: list[_types.Parameter]) -> None:
        try:
            self.setup({p.name: p.value for p in parameters})
        except Err:
            raise
        except Exception as failure:
            raise Err(f"{type(failure).__name__}: {failure}") from failure


class Predictor(_Stage):
    """Base of a `predictor` world's `WitWorld`: override `predict_batch`."""

    def predict_batch(self, batch: Item, failures: Failures) -> Iterable[Union[Output, _types.Tensor]]:
        raise NotImplementedError("a Predictor overrides predict_batch")

    def predict(self, batch: list[_types.Tensor]) -> _types.Prediction:
        failures = Failures()
        try:
            outputs = [_wit_tensor(t) for t in self.predict_batch(Item(batch), failures)]
        except Exception as failure:
            raise Err(_refusal(failure)) from None
        return _types.Prediction(outputs, failures.to_wit())


class _ItemStage(_Stage):
    def process_item(self, item: Item) -> Iterable[Union[Output, _types.Tensor]]:
        raise NotImplementedError("a Preprocessor or Postprocessor overrides process_item")

    def _each(self, items: list[list[_types.Tensor]]) -> list:
        results: list = []
        for tensors in items:
            try:
                results.append(Ok([_wit_tensor(t) for t in self.process_item(Item(tensors))]))
            except Exception as failure:
                results.append(Err(_refusal(failure)))
        return results


class Preprocessor(_ItemStage):
    """Base of a `preprocessor` world's `WitWorld`: override `process_item`."""

    def preprocess(self, items: list[list[_types.Tensor]]) -> list:
        return self._each(items)


class Postprocessor(_ItemStage):
    """Base of a `postprocessor` world's `WitWorld`: override `process_item`."""

    def postprocess(self, items: list[list[_types.Tensor]]) -> list:
        return self._each(items)


# --- logging, metrics, metadata ------------------------------------------------------------

def trace(message: str) -> None:
    _log.log(_log.Level.TRACE, message)


def debug(message: str) -> None:
    _log.log(_log.Level.DEBUG, message)


def info(message: str) -> None:
    _log.log(_log.Level.INFO, message)


def warn(message: str) -> None:
    _log.log(_log.Level.WARN, message)


def error(message: str) -> None:
    _log.log(_log.Level.ERROR, message)


def _metric(call, name: str, value: float, labels: Mapping[str, str]) -> None:
    try:
        call(name, [_metrics.Label(k, str(v)) for k, v in labels.items()], float(value))
    except Err as refused:
        raise ValueError(f"metric {name}: {refused.value}") from None


def counter_add(name: str, value: float = 1.0, **labels: str) -> None:
    """Adds `value` (>= 0) to counter `name` (served as tensorplug_plugin_<name>_total)."""
    _metric(_metrics.counter_add, name, value, labels)


def gauge_set(name: str, value: float, **labels: str) -> None:
    _metric(_metrics.gauge_set, name, value, labels)


def histogram_observe(name: str, value: float, **labels: str) -> None:
    _metric(_metrics.histogram_observe, name, value, labels)


def declare(key: str, value: str) -> None:
    """A fact in the model's metadata (callable in `setup` only)."""
    try:
        _metadata.declare(key, value)
    except Err as refused:
        raise ValueError(f"metadata {key}: {refused.value}") from None


# --- wasi:nn graphs and model files ----------------------------------------------------------

_NN_TYPES = {
    FP16: _nn_tensor.TensorType.FP16, FP32: _nn_tensor.TensorType.FP32,
    FP64: _nn_tensor.TensorType.FP64, UINT8: _nn_tensor.TensorType.U8,
    INT32: _nn_tensor.TensorType.I32, INT64: _nn_tensor.TensorType.I64,
}
_V2_TYPES = {nn: v2 for v2, nn in _NN_TYPES.items()}


class Graph:
    """A graph of `model.toml`'s `[graphs]`, run natively by the host. One execution
    context is kept and reused, so load a graph once (in `setup`)."""

    def __init__(self, name: str) -> None:
        self.name = name
        try:
            self._graph = _nn_graph.load_by_name(name)
            self._context = self._graph.init_execution_context()
        except Err as failed:
            raise RuntimeError(f"graph {name}: {_nn_error(failed)}") from None

    def compute(self, inputs: Mapping[str, Union[Output, TensorView]]) -> dict[str, TensorView]:
        """Runs the graph on named tensors; returns its outputs as views, by name. Inputs
        the graph refuses (wrong shape or type) raise a 400 `ItemError`."""
        named = []
        for name, value in inputs.items():
            if value.datatype not in _NN_TYPES:
                raise ItemError(400, f"graph {self.name}: {value.datatype.name} has no wasi:nn type")
            named.append((name, _nn_tensor.Tensor(list(value.shape), _NN_TYPES[value.datatype],
                                                  value.to_wit().data)))
        try:
            computed = self._context.compute(named)
        except Err as failed:
            # The host checked the inputs against the graph: a refusal is the input's fault.
            raise ItemError(400, f"graph {self.name}: {_nn_error(failed)}") from None
        views = {}
        for name, tensor in computed:
            kind = tensor.ty()
            if kind not in _V2_TYPES:
                raise RuntimeError(f"graph {self.name}: output {name} is {kind.name}")
            views[name] = TensorView(_types.Tensor(name, _V2_TYPES[kind], tensor.dimensions(),
                                                   tensor.data()))
        return views


def _nn_error(failed: Err) -> str:
    cause = failed.value
    try:
        return f"{cause.code().name}: {cause.data()}"
    except Exception:  # an error resource this SDK does not know how to read
        return repr(cause)


def graph(name: str) -> Graph:
    return Graph(name)


def read_model_file(name: str) -> bytes:
    """The bytes of `name` in the model folder (readable in every call, typically read in
    `setup`)."""
    with open(f"{MODEL_DIR}/{name}", "rb") as file:
        return file.read()
