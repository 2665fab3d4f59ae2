// tensorplug's JavaScript SDK, for plugins built with componentize-js: typed tensor views
// and builders, item errors, the stage adapters (tensors.js), and the host's imports —
// logging, plugin metrics, metadata, wasi:nn graphs by name and model files.
//
//   import * as tp from './tensorplug.js';
//   export const { init, predict } = tp.predictor({ setup(parameters) {}, predictBatch(batch, failures) {} });
//
// Only a world's shared imports are used (`stage-imports` in wit/plugin.wit), so one SDK
// serves the three worlds.
import { log } from 'tensorplug:plugin/log@0.2.0';
import * as metrics from 'tensorplug:plugin/metrics@0.2.0';
import { declare as declareFact } from 'tensorplug:plugin/metadata@0.2.0';
import { loadByName } from 'wasi:nn/graph@0.2.0-rc-2024-10-28';
import { Tensor as NnTensor } from 'wasi:nn/tensor@0.2.0-rc-2024-10-28';
import { getDirectories } from 'wasi:filesystem/preopens@0.2.12';

import * as tensors from './tensors.js';

export { DATATYPES, ItemError, TensorView, Item, Output, output, Failures } from './tensors.js';

/** Where the host mounts the model folder, read-only. */
export const MODEL_DIR = '/model';

export const trace = (message) => log('trace', message);
export const debug = (message) => log('debug', message);
export const info = (message) => log('info', message);
export const warn = (message) => log('warn', message);
export const error = (message) => log('error', message);

/** The exports of each world; a plugin's own exceptions are logged (with their stack) at
 * `error` and answered as 500s that fail only the items that raised them. */
export const predictor = (stage) => tensors.predictor(stage, error);
export const preprocessor = (stage) => tensors.preprocessor(stage, error);
export const postprocessor = (stage) => tensors.postprocessor(stage, error);

/** What a refused host call threw, as text (the bindings throw the error value itself,
 * or an Error carrying it as `payload`). */
function reason(thrown) {
  const value = thrown?.payload ?? thrown;
  return typeof value === 'string' ? value : value?.message ?? String(value);
}

function metric(call, name, value, labels) {
  const pairs = Object.entries(labels).map(([key, text]) => ({ name: key, value: String(text) }));
  try {
    call(name, pairs, value);
  } catch (thrown) {
    throw new Error(`metric ${name}: ${reason(thrown)}`);
  }
}

/** Adds `value` (>= 0) to the counter `name` (served as tensorplug_plugin_<name>_total). */
export function counterAdd(name, value = 1, labels = {}) {
  metric(metrics.counterAdd, name, value, labels);
}

export function gaugeSet(name, value, labels = {}) {
  metric(metrics.gaugeSet, name, value, labels);
}

export function histogramObserve(name, value, labels = {}) {
  metric(metrics.histogramObserve, name, value, labels);
}

/** A fact in the model's metadata (callable in `setup` only). */
export function declare(key, value) {
  try {
    declareFact(key, value);
  } catch (thrown) {
    throw new Error(`metadata ${key}: ${reason(thrown)}`);
  }
}

const NN_TYPES = { fp16: 'fp16', fp32: 'fp32', fp64: 'fp64', uint8: 'u8', int32: 'i32', int64: 'i64' };
const V2_TYPES = Object.fromEntries(Object.entries(NN_TYPES).map(([v2, nn]) => [nn, v2]));

function nnReason(thrown) {
  const value = thrown?.payload ?? thrown;
  try {
    return `${value.code()}: ${value.data()}`;
  } catch {
    return reason(thrown);
  }
}

/** A graph of `model.toml`'s `[graphs]`, run natively by the host. One execution context
 * is kept and reused: load a graph once, in `setup`. */
export class Graph {
  constructor(name) {
    this.name = name;
    try {
      this.graph = loadByName(name);
      this.context = this.graph.initExecutionContext();
    } catch (thrown) {
      throw new Error(`graph ${name}: ${nnReason(thrown)}`);
    }
  }

  /** Runs the graph on `{ name: TensorView | Output }`; returns its outputs as views. A
   * refusal (wrong shape or type) is the input's fault: a 400. */
  compute(inputs) {
    const named = Object.entries(inputs).map(([name, value]) => {
      const ty = NN_TYPES[value.datatype];
      if (ty === undefined) throw new tensors.ItemError(400, `graph ${this.name}: ${value.datatype} has no wasi:nn type`);
      const { data } = value.toWit();
      return [name, new NnTensor(Uint32Array.from(value.shape), ty, data)];
    });
    let computed;
    try {
      computed = this.context.compute(named);
    } catch (thrown) {
      throw new tensors.ItemError(400, `graph ${this.name}: ${nnReason(thrown)}`);
    }
    const views = {};
    for (const [name, tensor] of computed) {
      const datatype = V2_TYPES[tensor.ty()];
      if (datatype === undefined) throw new Error(`graph ${this.name}: output ${name} is ${tensor.ty()}`);
      views[name] = new tensors.TensorView({ name, datatype, shape: tensor.dimensions(), data: tensor.data() });
    }
    return views;
  }
}

export const graph = (name) => new Graph(name);

function modelFolder() {
  const found = getDirectories().find(([, path]) => path === MODEL_DIR);
  if (found === undefined) throw new Error(`${MODEL_DIR} is not mounted`);
  return found[0];
}

/** The bytes of `name` in the model folder (typically read in `setup`). */
export function readModelFile(name) {
  let file;
  try {
    file = modelFolder().openAt({}, name, {}, { read: true });
  } catch (thrown) {
    throw new Error(`${MODEL_DIR}/${name}: ${reason(thrown)}`);
  }
  try {
    const size = Number(file.stat().size);
    const bytes = new Uint8Array(size);
    let at = 0;
    while (at < size) {
      const [chunk, end] = file.read(BigInt(Math.min(size - at, 1 << 20)), BigInt(at));
      bytes.set(chunk, at);
      at += chunk.length;
      if (end || chunk.length === 0) break;
    }
    if (at !== size) throw new Error(`${MODEL_DIR}/${name}: read ${at} of ${size} bytes`);
    return bytes;
  } finally {
    // The handle counts against the instance's table until it is dropped.
    file[Symbol.dispose]?.();
  }
}
