// The {{stage}} stage of {{name}}: passes each item's `{{tensor}}: FP32 [1]` on{{flow}}; an
// item whose {{tensor}} {{refusal}} fails alone with 422.
// build.sh puts the SDK (tensorplug.js, tensors.js) beside this file before building.
import * as tp from './tensorplug.js';

export const { init, {{stage}} } = tp.{{stage}}or({
  setup() {
    tp.debug('{{name}}: {{stage}} ready');
  },

  processItem(item) {
    const value = item.get('{{tensor}}', 'fp32', [1]);
    if (value.values[0] {{refused_if}}) {
      throw new tp.ItemError(422, `{{tensor}}: ${value.values[0]} {{refusal}} (checked by {{stage}})`);
    }
    return [value];
  },
});
