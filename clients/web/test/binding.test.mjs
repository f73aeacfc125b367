// The device binding's choice of an sblb report's ε0 under a growing batch schedule: the ε0 the
// analyzer publishes (TaskInfo.eps0_by_batch_size) for the largest length of the schedule not
// above the newest model's announced batch length, else the first — as the Python device
// picks it (services/device/runtime.py DeviceRuntime.report_randomizer); the length stated
// with the report only under a growing schedule. (The published table equals the Python
// device's ε0 per length: tests/services/device/test_calibration.py; the whole path in
// Chromium: tests/e2e/test_web_client.py.)
import { test } from "node:test";
import assert from "node:assert/strict";
import { build } from "esbuild";

// The page's modules (binding.ts, the device's index.ts) are not in the library bundle: each is
// bundled for this test alone and imported from the bundle's text.
async function bundledModule(path) {
  const out = await build({
    entryPoints: [new URL(path, import.meta.url).pathname],
    bundle: true, format: "esm", platform: "neutral", target: "es2022", write: false,
    mainFields: ["module", "main"], logLevel: "warning",
  });
  return import("data:text/javascript;base64," + Buffer.from(out.outputFiles[0].text).toString("base64"));
}
const { sizedLength, sblbRandomizer } = await bundledModule("../src/device/binding.ts");
const pb = await import("../dist/privbandit.js");
const { checkEncoding, checkFeatures } = await bundledModule("../src/device/index.ts");

const task = (table, policy = {}) => ({
  id: "t", threat_model: "shuffle", algo: "sblb", d: 3, K: 4, batch_size: 20,
  aggregation: "reports", policy: { m: 2, L: 1, eps0: null, ...policy }, eps0_by_batch_size: table,
});
const model = (batchSize) => ({ task: "t", version: 1, theta: [0, 0, 0], beta: 1, reports: 0,
  V: [[1, 0, 0], [0, 1, 0], [0, 0, 1]], batch_size: batchSize });

test("the length a report is sized for: the largest not above the announced one, else the first", () => {
  const lengths = [160, 20, 80, 40];
  assert.equal(sizedLength(lengths, null), 20);
  assert.equal(sizedLength(lengths, undefined), 20);
  assert.equal(sizedLength(lengths, 20), 20);
  assert.equal(sizedLength(lengths, 79), 40);
  assert.equal(sizedLength(lengths, 80), 80);
  assert.equal(sizedLength(lengths, 5000), 160);
  assert.equal(sizedLength(lengths, 7), 20); // below every length: the first
  assert.throws(() => sizedLength([], 20));
});

test("sblb randomises at the published ε0 of that length and states the length", () => {
  const table = { 20: 0.5, 40: 0.9, 80: 1.6, 160: 2.5 };
  for (const [announced, size] of [[null, 20], [40, 40], [100, 80], [160, 160]]) {
    const { rz, batchSize } = sblbRandomizer(task(table), model(announced));
    assert.equal(batchSize, size);
    assert.equal(rz.eps0, table[size]);
    assert.equal(rz.p, pb.flipProbability(table[size], 3, 2));
  }
});

test("one length (a fixed schedule) states none; a fixed eps0 without a table still serves", () => {
  const one = sblbRandomizer(task({ 20: 0.7 }), model(null));
  assert.equal(one.batchSize, null);
  assert.equal(one.rz.eps0, 0.7);
  const fixed = sblbRandomizer(task(null, { eps0: 1.25 }), model(null));
  assert.equal(fixed.batchSize, null);
  assert.equal(fixed.rz.eps0, 1.25);
  // A central target and no table (an analyzer older than the client): refused, not guessed.
  assert.throws(() => sblbRandomizer(task(null), model(null)), /eps0_by_batch_size/);
  assert.throws(() => sblbRandomizer(task({ "0": 1 }), model(null)), /not a batch length/);
});

test("a ddp-linucb task's intercept coordinates are checked when opened; per-arm ones are served", () => {
  const ddp = (policy) => ({ id: "p", threat_model: "shuffle", algo: "ddp-linucb", d: 20, K: 5,
    batch_size: 500, aggregation: "secure-sum", policy: { L: 1, encoding: "centered", ...policy } });
  const c = Math.SQRT1_2;
  assert.deepEqual(checkEncoding(ddp({ intercept: c, intercept_coords: [0] })), [0]);
  assert.deepEqual(checkEncoding(ddp({ intercept: c })), [0]); // an analyzer that does not say
  const perArm = [0, 4, 8, 12, 16];
  assert.deepEqual(checkEncoding(ddp({ intercept: c, intercept_coords: perArm })), perArm);
  // what the Python config would not state: refused rather than guessed at
  for (const bad of [[4, 0], [0, 0], [0, 20], [], "0"]) {
    assert.throws(() => checkEncoding(ddp({ intercept: c, intercept_coords: bad })),
      (err) => err.code === "unsupported_task" && /task p: intercept_coords must be increasing/.test(err.message),
      JSON.stringify(bad));
  }
  // decide's check: ⟨e, x⟩ = c over the blocks (c at the arm's block start, 0 at the others')
  const task = ddp({ intercept: c, intercept_coords: perArm });
  const X = Array.from({ length: 5 }, (_, a) => {
    const row = new Array(20).fill(0);
    row[4 * a] = c;
    row[4 * a + 1] = 0.5;
    return row;
  });
  checkFeatures(task, X);
  X[2][0] = 0.3; // now x[0] + x[8] = c + 0.3
  assert.throws(() => checkFeatures(task, X), (err) => err.code === "feature_intercept"
    && /the sum of x at coordinates \[0, 4, 8, 12, 16\] = 0\.7071.*row 2 has the sum of x at \[0, 4, 8, 12, 16\] = 1\.007/.test(err.message));
  // and with x[0] = c only, the row's x[0] is what is checked
  assert.throws(() => checkFeatures(ddp({ intercept: c }), X), (err) => err.code === "feature_intercept"
    && /row 1 has x\[0\] = 0$/.test(err.message));
  // the report builder takes the same coordinates (the library's DdpRandomizer)
  const rz = new pb.DdpRandomizer({ d: 20, encoding: "centered", intercept: c, intercept_coords: perArm });
  assert.equal(rz.rounded(X[1], 1).length, 230);
});
