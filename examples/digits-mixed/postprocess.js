// The digits-mixed model's postprocess stage, in JavaScript: per item, checks predict's
// `probabilities: FP32 [10]` (they must sum to 1, else the item fails with 500: predict is
// broken) and `label: INT64 []`, and answers `probabilities: FP32 [10]` and
// `label: INT64 [1]`, as the Rust digits postprocess does.
//
// With the parameter `min_confidence` (0 to 1, default 0), an item whose most probable
// class has a lower probability is refused with a 422 rather than answered with a guess.
import * as tp from '../../sdk/js/tensorplug.js';

/** How far the probabilities' sum may stray from 1 (f32 rounding over 10 terms is ~1e-6). */
const SUM_TOLERANCE = 1e-4;

let minConfidence = 0;

export const { init, postprocess } = tp.postprocessor({
  setup(parameters) {
    const text = parameters.min_confidence ?? '0';
    minConfidence = Number(text);
    if (!(minConfidence >= 0 && minConfidence <= 1)) {
      throw new Error(`parameter 'min_confidence': ${text} is not a number from 0 to 1`);
    }
  },

  processItem(item) {
    const probabilities = item.get('probabilities', 'fp32', [10]);
    const sum = probabilities.values.reduce((total, p) => total + p, 0);
    if (!(Math.abs(sum - 1) <= SUM_TOLERANCE)) {
      throw new tp.ItemError(500, `digits-mixed: probabilities sum to ${sum}, not 1`);
    }
    const label = item.get('label', 'int64');
    if (label.values.length !== 1) throw new tp.ItemError(500, `digits-mixed: ${label.values.length} labels`);
    const digit = Number(label.values[0]);
    if (!(digit >= 0 && digit <= 9)) throw new tp.ItemError(500, `digits-mixed: label ${digit} is not a digit`);
    const confidence = probabilities.values[digit];
    if (confidence < minConfidence) {
      throw new tp.ItemError(
        422,
        `not confident: the likeliest digit, ${digit}, has probability ${confidence.toFixed(3)} (min_confidence ${minConfidence})`,
      );
    }
    return [probabilities, tp.output('label', 'int64', [1], label.values)];
  },
});
