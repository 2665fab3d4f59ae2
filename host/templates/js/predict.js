// The predict stage of {{name}}: y = 2 * x for a batch of `x: FP32 [N, 1]`; an item whose
// x is negative fails alone with 422, its neighbours get their y. Read weights in `setup`:
// top-level code runs when the component is built, not where it is served.
// build.sh puts the SDK (tensorplug.js, tensors.js) beside this file before building.
import * as tp from './tensorplug.js';

export const { init, predict } = tp.predictor({
  setup() {
    tp.debug('{{name}}: predict ready');
  },

  predictBatch(batch, failures) {
    const x = batch.get('x', 'fp32', [-1, 1]);
    const y = tp.output('y', 'fp32', x.shape);
    x.values.forEach((value, i) => {
      if (value < 0) failures.fail(i, 422, `x: ${value} is negative`);
      else y.values[i] = 2 * value;
    });
    return [y];
  },
});
