// A predictor in JavaScript that misbehaves on request, for the host's fault tests in
// every language (tests/e2e/interpreted.rs); built with the SDK (sdk/js).
//
// Input `x: FP32 [N, 1]`, output `y: FP32 [N, 1] = 2 * x`. An item whose value is one of
// these codes triggers a fault:
//
// | x | fault |
// | --- | --- |
// | -1 | throws an Error in `predictBatch` (the SDK answers the batch 500; the host splits it) |
// | -2 | loops forever (the deadline) |
// | -3 | allocates until memory runs out |
// | -5 | fails alone: 422 "faulty-js: item rejected" |
// | -11 | logs 1 MiB with console.log and console.error, then answers as usual |
// | -4 | recurses without end (SpiderMonkey's "too much recursion": the item's 500) |
// | -9 | waits 3 s by Date.now() (componentize-js has no synchronous sleep: a busy wait, which
// |    | the deadline cuts like Python's `time.sleep`) |
// | -51 | the batch also answers `blob: BYTES [N, 1]`, whose element is 80 MiB for this item and
// |     | empty for the others (declare no outputs, so `blob` may appear; past
// |     | `max_answer_mib` the item's 500) |
// | -60 | tries the sandbox's walls and fails the item 422 with what each attempt met: the
// |     | environment, `require` (a wall that gives way says BREACH) |
// | -62 | calls `fetch` (the host gives no wasi:http: the component traps, the item's 500) |
// | -71 | throws from the export itself, past the SDK (a whole-call error) |
import * as tp from '../../../sdk/js/tensorplug.js';

// Code -51's element of `blob`: far past any test's max_answer_mib, and enough that the
// instance grows more than the 64 MiB past its start after which the host replaces it.
const HUGE = 80 << 20;

function recurse(depth) {
  return recurse(depth + 1) + 1;
}

// What each attempt to leave the sandbox met.
function walls() {
  const met = [];
  const env = globalThis.process?.env;
  met.push(env && Object.keys(env).length ? 'BREACH environment' : 'environment: none');
  met.push(typeof globalThis.require === 'function' ? 'BREACH require' : 'require: absent');
  return met.join('; ');
}

const exports = tp.predictor({
  predictBatch(batch, failures) {
    const x = batch.get('x', 'fp32', [-1, 1]);
    const y = tp.output('y', 'fp32', x.shape);
    x.values.forEach((value, i) => {
      if (value === -1) throw new Error('faulty-js: exception requested');
      if (value === -2) for (;;);
      if (value === -3) {
        const hog = [];
        for (;;) hog.push(new Float64Array(1 << 17).fill(i));
      }
      if (value === -5) failures.fail(i, 422, 'faulty-js: item rejected');
      if (value === -4) recurse(0);
      if (value === -9) {
        const until = Date.now() + 3000;
        while (Date.now() < until);
      }
      if (value === -60) failures.fail(i, 422, `faulty-js walls: ${walls()}`);
      if (value === -62) fetch('http://127.0.0.1:8080/v2/health/live').then(() => console.error('BREACH fetch answered'));
      if (value === -11) {
        for (let line = 0; line < 256; line++) {
          console.log('o'.repeat(4095));
          console.error('e'.repeat(4095));
        }
      }
      y.values[i] = 2 * value;
    });
    tp.counterAdd('batches');
    if (x.values.includes(-51)) {
      // BYTES elements have sizes of their own: only this item's row is huge, so its
      // neighbours in the call stay answerable (an FP32 row is as wide as the widest).
      const blobs = Array.from(x.values, (v) => (v === -51 ? new Uint8Array(HUGE).fill(255) : ''));
      return [y, tp.output('blob', 'bytes', x.shape, blobs)];
    }
    return [y];
  },
});

export const init = exports.init;

export function predict(batch) {
  if (new tp.Item(batch).get('x').values.includes(-71)) throw new Error('faulty-js: thrown past the SDK');
  return exports.predict(batch);
}
