// Tensors, item errors and the stage adapters of tensorplug's JavaScript SDK: everything
// that does not call the host, so it runs (and is unit-tested) under Node as well.
// tensorplug.js re-exports all of it next to the host's imports.
//
// The wire types are the bindings' (componentize-js): a tensor is
// `{ name, datatype: 'fp32', shape: BigUint64Array | bigint[], data: Uint8Array }`. Views and
// outputs hide the BigInts: their `shape` is an array of numbers.

/** Element arrays per datatype (BYTES has none: its elements are length-prefixed). */
const ARRAYS = {
  bool: Uint8Array,
  uint8: Uint8Array,
  uint16: Uint16Array,
  uint32: Uint32Array,
  uint64: BigUint64Array,
  int8: Int8Array,
  int16: Int16Array,
  int32: Int32Array,
  int64: BigInt64Array,
  // No Float16Array before ES2025: FP16 elements are their raw 16 bits.
  fp16: Uint16Array,
  fp32: Float32Array,
  fp64: Float64Array,
};

export const DATATYPES = [...Object.keys(ARRAYS), 'bytes'];

/** A refusal with an HTTP-style status: 4xx blames the input (400 when in doubt, 422 for
 * well-formed but unacceptable values), 5xx the plugin. */
export class ItemError extends Error {
  constructor(status, message) {
    super(message);
    this.name = 'ItemError';
    this.status = status;
  }
}

function count(shape) {
  return shape.reduce((n, size) => n * size, 1);
}

function splitBytes(data, name) {
  const elements = [];
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  let at = 0;
  while (at < data.length) {
    if (at + 4 > data.length) throw new ItemError(400, `${name}: a BYTES element's length is cut short`);
    const length = view.getUint32(at, true);
    at += 4;
    if (at + length > data.length) throw new ItemError(400, `${name}: a BYTES element is longer than the data`);
    elements.push(data.subarray(at, at + length));
    at += length;
  }
  return elements;
}

function joinBytes(elements) {
  const encoder = new TextEncoder();
  const raw = elements.map((e) => (typeof e === 'string' ? encoder.encode(e) : e));
  const out = new Uint8Array(raw.reduce((n, r) => n + 4 + r.length, 0));
  const view = new DataView(out.buffer);
  let at = 0;
  for (const r of raw) {
    view.setUint32(at, r.length, true);
    out.set(r, at + 4);
    at += 4 + r.length;
  }
  return out;
}

/** Elements of `type` over `data` without a copy when aligned (the host's buffers are). */
function typedView(type, data) {
  const size = type.BYTES_PER_ELEMENT;
  if (data.byteOffset % size === 0) return new type(data.buffer, data.byteOffset, data.byteLength / size);
  return new type(data.slice().buffer);
}

/** A typed, read-only view of a tensor the host passed in. `values` is a typed array
 * (Float32Array for fp32, BigInt64Array for int64, ...), or an array of Uint8Array for
 * bytes; `shape` is an array of numbers. */
export class TensorView {
  constructor(tensor) {
    this.name = tensor.name;
    this.datatype = tensor.datatype;
    this.shape = Array.from(tensor.shape, Number);
    this.data = tensor.data;
    const type = ARRAYS[this.datatype];
    if (type === undefined) {
      this.values = splitBytes(tensor.data, this.name);
    } else {
      if (tensor.data.length !== count(this.shape) * type.BYTES_PER_ELEMENT) {
        throw new ItemError(400, `${this.name}: ${tensor.data.length} bytes of data do not fill shape [${this.shape}] of ${this.datatype}`);
      }
      this.values = typedView(type, tensor.data);
    }
    if (this.values.length !== count(this.shape)) {
      throw new ItemError(400, `${this.name}: ${this.values.length} elements for shape [${this.shape}]`);
    }
  }

  /** Checks the datatype and shape (-1: any size), else throws a 400. */
  expect(datatype, shape) {
    if (this.datatype !== datatype) throw new ItemError(400, `${this.name}: expected ${datatype}, got ${this.datatype}`);
    if (shape.length !== this.shape.length || shape.some((want, i) => want !== -1 && want !== this.shape[i])) {
      throw new ItemError(400, `${this.name}: expected shape [${shape}], got [${this.shape}]`);
    }
    return this;
  }

  /** The size of the first dimension (a batched tensor's batch size). */
  get length() {
    return this.shape.length ? this.shape[0] : 1;
  }

  /** Row `index` along the first dimension, as a view of the same elements. */
  row(index) {
    const width = count(this.shape.slice(1));
    return this.values.subarray
      ? this.values.subarray(index * width, (index + 1) * width)
      : this.values.slice(index * width, (index + 1) * width);
  }

  /** Every row along the first dimension (one per item of a batch). */
  *rows() {
    for (let i = 0; i < this.length; i++) yield this.row(i);
  }

  /** The tensor as the host takes it back (e.g. to pass an input through). */
  toWit() {
    return { name: this.name, datatype: this.datatype, shape: BigUint64Array.from(this.shape, BigInt), data: this.data };
  }
}

/** One item's (or one batch's) tensors by name; a missing name is the input's fault. */
export class Item {
  constructor(tensors) {
    this.tensors = new Map(tensors.map((t) => [t.name, t]));
    this.views = new Map();
  }

  has(name) {
    return this.tensors.has(name);
  }

  names() {
    return [...this.tensors.keys()];
  }

  /** The tensor `name`, checked against `datatype` and `shape` when given. */
  get(name, datatype, shape) {
    const tensor = this.tensors.get(name);
    if (tensor === undefined) throw new ItemError(400, `missing input tensor '${name}'`);
    let view = this.views.get(name);
    if (view === undefined) {
      view = new TensorView(tensor);
      this.views.set(name, view);
    }
    if (datatype !== undefined) view.expect(datatype, shape ?? view.shape.map(() => -1));
    return view;
  }
}

/** A tensor being built: `values` is a writable typed array, zero-filled or holding the
 * given values (for bytes: an array of strings or Uint8Arrays). */
export class Output {
  constructor(name, datatype, shape, values) {
    if (!DATATYPES.includes(datatype)) throw new TypeError(`${name}: unknown datatype ${datatype}`);
    this.name = name;
    this.datatype = datatype;
    this.shape = Array.from(shape, Number);
    const n = count(this.shape);
    const type = ARRAYS[datatype];
    if (values !== undefined && values.length !== n) {
      throw new RangeError(`${name}: ${values.length} values for shape [${this.shape}]`);
    }
    if (type === undefined) this.values = values ? Array.from(values) : new Array(n).fill('');
    else this.values = values ? type.from(values) : new type(n);
  }

  /** Row `index` along the first dimension, writable in place. */
  row(index) {
    const width = count(this.shape.slice(1));
    return this.values.subarray(index * width, (index + 1) * width);
  }

  toWit() {
    const data = ARRAYS[this.datatype] === undefined
      ? joinBytes(this.values)
      : new Uint8Array(this.values.buffer, this.values.byteOffset, this.values.byteLength);
    return { name: this.name, datatype: this.datatype, shape: BigUint64Array.from(this.shape, BigInt), data };
  }
}

export function output(name, datatype, shape, values) {
  return new Output(name, datatype, shape, values);
}

/** The items of a batch that failed alone (their output rows are ignored). */
export class Failures {
  constructor() {
    this.list = [];
  }

  fail(index, status, message) {
    this.list.push({ index, error: { status, message } });
  }

  get length() {
    return this.list.length;
  }
}

function toWit(tensor) {
  return typeof tensor.toWit === 'function' ? tensor.toWit() : tensor;
}

/** What a plugin's own bug becomes: a 500 carrying the exception, logged with its stack. */
function uncaught(failure, report) {
  const message = failure instanceof Error ? `${failure.name}: ${failure.message}` : `uncaught ${String(failure)}`;
  report(failure instanceof Error && failure.stack ? `${message}\n${failure.stack}` : message);
  return { status: 500, message };
}

function refusal(failure, report) {
  if (failure instanceof ItemError) return { status: failure.status, message: failure.message };
  return uncaught(failure, report);
}

function initExport(stage) {
  return (parameters) => {
    const byName = Object.fromEntries(parameters.map((p) => [p.name, p.value]));
    try {
      stage.setup?.(byName);
    } catch (failure) {
      // init's error is a string: the reason the model did not load.
      throw failure instanceof Error ? `${failure.name}: ${failure.message}` : String(failure);
    }
  };
}

/** The `predictor` world's exports from `{ setup(parameters), predictBatch(batch, failures) }`.
 * `predictBatch` gets the batch as an `Item` (each tensor with the batch dimension first)
 * and returns its outputs; it fails single items with `failures.fail(index, status, msg)`.
 * Throwing an `ItemError` fails the whole batch with its status; any other exception is a
 * 500 for the batch, which the host splits until only the item that threw fails. */
export function predictor(stage, report = () => {}) {
  return {
    init: initExport(stage),
    predict(batch) {
      const failures = new Failures();
      let outputs;
      try {
        outputs = stage.predictBatch(new Item(batch), failures);
      } catch (failure) {
        throw refusal(failure, report);
      }
      return { outputs: outputs.map(toWit), failures: failures.list };
    },
  };
}

/** One result per item from `{ setup(parameters), processItem(item) }`: an `ItemError`
 * fails that item with its status, any other exception with 500; the others go on. */
function eachItem(stage, report) {
  return (items) =>
    items.map((tensors) => {
      try {
        return { tag: 'ok', val: stage.processItem(new Item(tensors)).map(toWit) };
      } catch (failure) {
        return { tag: 'err', val: refusal(failure, report) };
      }
    });
}

/** The `preprocessor` world's exports from `{ setup(parameters), processItem(item) }`. */
export function preprocessor(stage, report = () => {}) {
  return { init: initExport(stage), preprocess: eachItem(stage, report) };
}

/** The `postprocessor` world's exports from `{ setup(parameters), processItem(item) }`. */
export function postprocessor(stage, report = () => {}) {
  return { init: initExport(stage), postprocess: eachItem(stage, report) };
}
