// The digits model's predict stage in JavaScript: the same weights files and forward pass
// as the Rust `digits-predict` (examples/digits/model), so the same answers. Loads
// W0/b0/W1/b1.f32 from the model folder in `setup` and classifies a batch
// `input-0: FP32 [N, 64]` into `probabilities: FP32 [N, 10]` and `label: INT64 [N]`.
//
// An image whose pixels are all 0 has nothing to classify: that item fails alone with a
// 422, its neighbours get their rows. The plugin counts those (`blank_images`) and
// observes each batch's size (`batch_size`) in its own metrics. Built by scripts/build-js-plugins.sh with
// componentize-js and the SDK in sdk/js.
import * as tp from '../../sdk/js/tensorplug.js';

const INPUTS = 64;
const HIDDEN = 64;
const CLASSES = 10;

/** Row-major, as in the model folder; loaded once per instance by setup. */
let w0, b0, w1, b1;

function floats(name, count) {
  const bytes = tp.readModelFile(name);
  if (bytes.length !== count * 4) throw new Error(`${name}: ${bytes.length} bytes, expected ${count * 4}`);
  return new Float32Array(bytes.buffer, bytes.byteOffset, count);
}

/** Writes softmax probabilities into `proba`; returns the most probable class (the first
 * on ties, like numpy's argmax). Sums over the inputs in order, kept in float32 arrays as
 * in Rust (the engine has no JIT here: plain loops over typed arrays are what is fast). */
function classify(image, proba) {
  const hidden = Float32Array.from(b0);
  for (let k = 0; k < INPUTS; k++) {
    const x = image[k];
    if (x === 0) continue;
    const row = k * HIDDEN;
    for (let j = 0; j < HIDDEN; j++) hidden[j] += x * w0[row + j];
  }
  const z = Float32Array.from(b1);
  for (let k = 0; k < HIDDEN; k++) {
    const h = hidden[k] > 0 ? hidden[k] : 0; // ReLU; a NaN unit gives 0
    if (h === 0) continue;
    const row = k * CLASSES;
    for (let j = 0; j < CLASSES; j++) z[j] += h * w1[row + j];
  }
  let best = 0;
  for (let j = 1; j < CLASSES; j++) if (z[j] > z[best]) best = j;
  let sum = 0;
  for (let j = 0; j < CLASSES; j++) sum += proba[j] = Math.exp(z[j] - z[best]);
  for (let j = 0; j < CLASSES; j++) proba[j] /= sum;
  return best;
}

export const { init, predict } = tp.predictor({
  setup() {
    w0 = floats('W0.f32', INPUTS * HIDDEN);
    b0 = floats('b0.f32', HIDDEN);
    w1 = floats('W1.f32', HIDDEN * CLASSES);
    b1 = floats('b1.f32', CLASSES);
    tp.debug(`digits-js: weights loaded from ${tp.MODEL_DIR}`);
    tp.declare('labels', '0,1,2,3,4,5,6,7,8,9');
    tp.declare('description', 'The digits MLP, predicted by a plugin written in JavaScript');
  },

  predictBatch(batch, failures) {
    const pixels = batch.get('input-0', 'fp32', [-1, INPUTS]);
    const n = pixels.length;
    const probabilities = tp.output('probabilities', 'fp32', [n, CLASSES]);
    const labels = tp.output('label', 'int64', [n]);
    let blank = 0;
    for (let i = 0; i < n; i++) {
      const image = pixels.row(i);
      if (image.every((x) => x === 0)) {
        failures.fail(i, 422, 'input-0: every pixel is 0, there is no digit to classify');
        blank += 1;
        continue;
      }
      labels.values[i] = BigInt(classify(image, probabilities.row(i)));
    }
    // The plugin's own metrics, on the host's /metrics as tensorplug_plugin_*.
    tp.histogramObserve('batch_size', n);
    if (blank > 0) tp.counterAdd('blank_images', blank);
    return [probabilities, labels];
  },
});
