// Unit tests of the SDK's host-free half (tensors.js) under Node: `node --test sdk/js/test`.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { Failures, Item, ItemError, output, postprocessor, predictor, TensorView } from '../tensors.js';

const f32 = (values) => new Uint8Array(Float32Array.from(values).buffer);
const tensor = (name, datatype, shape, data) => ({ name, datatype, shape: BigUint64Array.from(shape, BigInt), data });

test('a view reads typed values and hides the BigInt shape', () => {
  const view = new TensorView(tensor('x', 'fp32', [2, 3], f32([1, 2, 3, 4, 5, 6])));
  assert.deepEqual(view.shape, [2, 3]);
  assert.equal(view.length, 2);
  assert.ok(view.values instanceof Float32Array);
  assert.deepEqual(Array.from(view.row(1)), [4, 5, 6]);
  assert.deepEqual([...view.rows()].map((r) => Array.from(r)), [[1, 2, 3], [4, 5, 6]]);
});

test('int64 views are BigInt64Arrays', () => {
  const data = new Uint8Array(BigInt64Array.from([-1n, 7n]).buffer);
  const view = new TensorView(tensor('n', 'int64', [2], data));
  assert.deepEqual(Array.from(view.values), [-1n, 7n]);
});

test('a view of data that does not fill its shape is a 400', () => {
  assert.throws(() => new TensorView(tensor('x', 'fp32', [2, 3], f32([1, 2]))), (e) => e instanceof ItemError && e.status === 400);
});

test('an unaligned buffer is copied, not misread', () => {
  const bytes = new Uint8Array(9);
  bytes.set(f32([1.5, -2]), 1);
  const view = new TensorView(tensor('x', 'fp32', [2], bytes.subarray(1)));
  assert.deepEqual(Array.from(view.values), [1.5, -2]);
});

test('bytes elements are split on their length prefixes, and a cut one is a 400', () => {
  const out = output('s', 'bytes', [2], ['ab', new Uint8Array([0, 255])]);
  const wit = out.toWit();
  assert.deepEqual(Array.from(wit.data), [2, 0, 0, 0, 97, 98, 2, 0, 0, 0, 0, 255]);
  const view = new TensorView(wit);
  assert.deepEqual(view.values.map((v) => Array.from(v)), [[97, 98], [0, 255]]);
  assert.throws(() => new TensorView({ ...wit, data: wit.data.subarray(0, 11) }), /longer than the data/);
  assert.throws(() => new TensorView({ ...wit, data: wit.data.subarray(0, 7) }), (e) => e.status === 400 && /cut short/.test(e.message));
});

test('expect checks the datatype and the shape, -1 matching any size', () => {
  const view = new TensorView(tensor('x', 'fp32', [4, 1], f32([1, 2, 3, 4])));
  assert.equal(view.expect('fp32', [-1, 1]), view);
  assert.throws(() => view.expect('int32', [-1, 1]), /expected int32, got fp32/);
  assert.throws(() => view.expect('fp32', [-1, 2]), /expected shape \[-1,2\], got \[4,1\]/);
  assert.throws(() => view.expect('fp32', [-1]), (e) => e.status === 400);
});

test('an item names the missing tensor in a 400', () => {
  const item = new Item([tensor('x', 'fp32', [1], f32([1]))]);
  assert.deepEqual(item.names(), ['x']);
  assert.throws(() => item.get('y'), (e) => e instanceof ItemError && e.status === 400 && /missing input tensor 'y'/.test(e.message));
});

test('outputs are zero-filled, writable by row, and go back with BigInt shapes', () => {
  const out = output('y', 'fp32', [2, 2]);
  out.row(1).set([3, 4]);
  const wit = out.toWit();
  assert.deepEqual(Array.from(wit.shape), [2n, 2n]);
  assert.deepEqual(Array.from(new Float32Array(wit.data.buffer)), [0, 0, 3, 4]);
  assert.throws(() => output('y', 'fp32', [2], [1, 2, 3]), RangeError);
  assert.throws(() => output('y', 'float', [1]), TypeError);
});

test('predict: failures stay per item, an ItemError fails the batch, a bug is a 500', () => {
  const batch = [tensor('x', 'fp32', [3, 1], f32([1, -1, 2]))];
  const reported = [];
  const { predict } = predictor({
    predictBatch(b, failures) {
      const x = b.get('x', 'fp32', [-1, 1]);
      if (x.values.includes(2) && x.values.length === 1) throw new ItemError(422, 'two');
      x.values.forEach((v, i) => v < 0 && failures.fail(i, 422, 'negative'));
      if (x.values.includes(99)) throw new TypeError('a bug');
      return [output('y', 'fp32', x.shape, x.values)];
    },
  }, (line) => reported.push(line));
  const answer = predict(batch);
  assert.deepEqual(answer.failures, [{ index: 1, error: { status: 422, message: 'negative' } }]);
  assert.deepEqual(Array.from(new Float32Array(answer.outputs[0].data.buffer)), [1, -1, 2]);
  assert.throws(() => predict([tensor('x', 'fp32', [1, 1], f32([2]))]), (e) => e.status === 422 && e.message === 'two');
  assert.throws(() => predict([tensor('x', 'fp32', [1, 1], f32([99]))]), (e) => e.status === 500 && e.message === 'TypeError: a bug');
  assert.equal(reported.length, 1);
  assert.match(reported[0], /TypeError: a bug/);
});

test('item stages answer one result per item and isolate what each item throws', () => {
  const { init, postprocess } = postprocessor({
    setup(parameters) {
      if (parameters.fail === 'yes') throw new Error('no weights');
    },
    processItem(item) {
      const v = item.get('x').values[0];
      if (v < 0) throw new ItemError(422, 'negative');
      if (v === 0) throw 'a string';
      return [output('y', 'fp32', [1], [v * 2])];
    },
  });
  init([{ name: 'fail', value: 'no' }]);
  assert.throws(() => init([{ name: 'fail', value: 'yes' }]), (e) => e === 'Error: no weights');
  const results = postprocess([1, -1, 0].map((v) => [tensor('x', 'fp32', [1], f32([v]))]));
  assert.deepEqual(results.map((r) => r.tag), ['ok', 'err', 'err']);
  assert.deepEqual(results[1].val, { status: 422, message: 'negative' });
  assert.deepEqual(results[2].val, { status: 500, message: 'uncaught a string' });
  assert.equal(new Float32Array(results[0].val[0].data.buffer)[0], 2);
});

test('failures count what failed', () => {
  const failures = new Failures();
  failures.fail(3, 400, 'bad');
  assert.equal(failures.length, 1);
});
