// The local decision rule: argmax ⟨x, θ̃⟩ + β‖x‖_{V⁻¹}, ties to the lowest index, propensity 1;
// the feature and model checks. (Equality with the Python device on the same inputs:
// tests/interop/test_web_client.py.)
import { test } from "node:test";
import assert from "node:assert/strict";

import * as pb from "../dist/privbandit.js";

const model = (theta, V, beta) => ({ version: 1, theta, V, beta });

test("the index is ⟨x, θ̃⟩ + β ‖x‖_{V⁻¹}", () => {
  const V = [[4, 1], [1, 3]];
  const inv = [[3 / 11, -1 / 11], [-1 / 11, 4 / 11]];
  const dec = new pb.Decider(model([0.5, -1], V, 2));
  const X = [[0.3, 0.4], [-0.6, 0.1], [0, -0.9]];
  const want = X.map(([a, b]) => 0.5 * a - b + 2 * Math.sqrt(a * (inv[0][0] * a + inv[0][1] * b) + b * (inv[1][0] * a + inv[1][1] * b)));
  dec.scores(X).forEach((s, i) => assert.ok(Math.abs(s - want[i]) < 1e-14));
  const d = dec.decide(X);
  assert.equal(d.action, want.indexOf(Math.max(...want)));
  assert.equal(d.propensity, 1);
});

test("ties go to the lowest index; β = 0 is the mean alone", () => {
  const dec = new pb.Decider(model([0, 0], [[1, 0], [0, 1]], 1));
  assert.equal(dec.decide([[0.1, 0], [0.5, 0.5], [0.5, 0.5], [-0.5, -0.5]]).action, 1);
  const greedy = new pb.Decider(model([1, 0], [[1, 0], [0, 1]], 0));
  assert.deepEqual(greedy.decide([[0.2, 0.9], [0.2, 0], [0.1, 0]]).scores, [0.2, 0.2, 0.1]);
  assert.equal(greedy.decide([[0.2, 0.9], [0.2, 0], [0.1, 0]]).action, 0);
});

test("a model whose V is not symmetric positive definite is refused", () => {
  assert.throws(() => new pb.Decider(model([0, 0], [[1, 2], [2, 1]], 1)), /positive definite/);
  assert.throws(() => new pb.Decider(model([0, 0], [[1, 0.1], [0, 1]], 1)), /symmetric/);
  assert.throws(() => new pb.Decider(model([0, 0], [[1, 0]], 1)), /2x2/);
  assert.throws(() => new pb.Decider(model([0, NaN], [[1, 0], [0, 1]], 1)), /finite/);
  assert.throws(() => new pb.Decider(model([0, 0], [[1, 0], [0, 1]], -1)), /beta/);
});

test("features are checked as the device checks them", () => {
  pb.checkFeatures([[0.6, 0.8], [0, 0]], 2, 2, 1);
  pb.checkFeatures([[0.6, 0.8 * (1 + 1e-10)]], 1, 2, 1); // the 1e-9 slack
  assert.throws(() => pb.checkFeatures([[0.6, 0.8]], 2, 2, 1), /K = 2/);
  assert.throws(() => pb.checkFeatures([[0.6, 0.8, 0], [0, 0]], 2, 2, 1), /d = 2/);
  assert.throws(() => pb.checkFeatures([[0.6, 0.9], [0, 0]], 2, 2, 1), /row 0/);
  assert.throws(() => pb.checkFeatures([[0.5, 0.1], [0.6, 0]], 2, 2, 1, 0.5), /row 1/);
  assert.throws(() => pb.checkFeatures([[Infinity, 0]], 1, 2, 1), /finite/);
  // an intercept over coordinates E (per-arm features: every block start): ⟨e, x⟩ = c
  const c = 0.6;
  pb.checkFeatures([[c, 0.5, 0, 0], [0, 0, c, 0.5]], 2, 4, 1, c, [0, 2]);
  assert.throws(() => pb.checkFeatures([[c, 0.5, 0, 0], [c, 0, c, 0]], 2, 4, 1, c, [0, 2]),
    /the sum of x at coordinates \[0, 2\] = 0\.6; row 1 has the sum of x at \[0, 2\] = 1\.2/);
  assert.throws(() => pb.checkFeatures([[c, 0.5, 0, 0], [0, 0, c, 0.5]], 2, 4, 1, c), /row 1 has x\[0\] = 0/);
});
