// The local randomizers' guarantees, statistically (fixed sample sizes, 5 standard errors):
// the 0/1 randomizer's per-bit likelihood ratio (its exact ε0) and its estimator's
// unbiasedness; the Gaussian's calibration (δ(σ) ≤ δ, tight) and zero-mean noise of variance
// σ²; ddp-linucb's unbiased rounding within the norm bound.
import { test } from "node:test";
import assert from "node:assert/strict";

import * as pb from "../dist/privbandit.js";

const within = (got, want, se, what) =>
  assert.ok(Math.abs(got - want) <= 5 * se, `${what}: ${got} vs ${want} (se ${se})`);

test("0/1 randomizer: a kept bit reads 1 − p/2, a flipped one p/2 (ratio e^{2ε0/(m d(d+3))})", () => {
  // d = 1, L = 1, x = −1, r = 1: values (r x/2 + ½, x²/2 + ½) = (0, 1), so the bits are (0, 1)
  const rz = new pb.BinaryRandomizer(1, 1.0, 1, 1.0);
  assert.equal(rz.p, 1 - Math.tanh(2 / 4 / 2));
  const n = 50000;
  let zeroOut = 0, oneOut = 0;
  for (let i = 0; i < n; i++) {
    const { bits } = rz.randomize([-1], 1);
    zeroOut += bits[0];
    oneOut += bits[1];
  }
  const p = rz.p, se = Math.sqrt((p / 2) * (1 - p / 2) / n);
  within(zeroOut / n, p / 2, se, "P(1 | 0)");
  within(oneOut / n, 1 - p / 2, se, "P(1 | 1)");
  // the exact ratio the accountant uses: (1 − p/2)/(p/2) = e^{2ε0/(m d(d+3))}
  assert.ok(Math.abs((1 - p / 2) / (p / 2) / Math.exp(2 * 1.0 / 4) - 1) < 1e-12);
});

test("0/1 randomizer: the debiased counts are unbiased for the values", () => {
  const d = 2, m = 3, L = 1.5;
  const rz = new pb.BinaryRandomizer(d, 4.0, m, L);
  const x = [0.9, -0.7], r = 0.35;
  const values = pb.encodeValues(x, r, L);
  assert.equal(values.length, rz.c);
  const n = 20000;
  const sum = new Array(rz.c).fill(0);
  for (let i = 0; i < n; i++) {
    const { bits, counts } = rz.randomize(x, r);
    assert.equal(bits.length, rz.width);
    counts.forEach((c, k) => { assert.ok(c >= 0 && c <= m); sum[k] += c; });
  }
  // (Z − n m p/2) / (m (1 − p)) estimates Σ v (binary.estimate); one count's sd ≤ √m/2
  const p = rz.p;
  values.forEach((v, k) => {
    const est = (sum[k] - (n * m * p) / 2) / (m * (1 - p)) / n;
    within(est, v, Math.sqrt(m) / 2 / (m * (1 - p)) / Math.sqrt(n), `value ${k}`);
  });
});

test("0/1 randomizer refuses what the device refuses", () => {
  const rz = new pb.BinaryRandomizer(2, 1.0, 1, 1.0);
  assert.throws(() => rz.randomize([1, 1], 0.5), /L = 1/);
  assert.throws(() => rz.randomize([0.1], 0.5), /2 entries/);
  assert.throws(() => rz.randomize([0.1, 0], 1.5), /\[0, 1\]/);
  assert.throws(() => rz.randomize([NaN, 0], 0.5), /finite/);
});

test("log Φ against reference values (Φ(−1), Φ(1), Φ(−10), Φ(−40))", () => {
  const ref = [[-1, Math.log(0.15865525393145707)], [1, Math.log(0.8413447460685429)],
    [-10, Math.log(7.619853024160527e-24)], [-40, -804.6084420137538], [0, Math.log(0.5)]];
  for (const [x, want] of ref) assert.ok(Math.abs(pb.logNdtr(x) - want) <= 1e-13 * Math.abs(want) + 1e-16, `${x}`);
});

test("Gaussian: σ is (ε, δ)-calibrated and tight; sensitivities of the encodings", () => {
  assert.equal(pb.encodingSensitivity(1, "plain"), Math.sqrt(4.5));
  assert.ok(Math.abs(pb.encodingSensitivity(1, "frobenius", 1) ** 2 - 4.5) < 1e-12);
  assert.ok(Math.abs(pb.encodingSensitivity(1, "centered", 1, Math.SQRT1_2) ** 2 - (2 + 0.5 + 1 / 32)) < 1e-12);
  for (const [eps, delta, sens] of [[1, 1e-6, Math.sqrt(4.5)], [0.1, 1e-9, 2], [8, 1e-5, 1]]) {
    const s = pb.gaussianSigma(eps, delta, sens);
    const a = (sg) => sens / (2 * sg) - (eps * sg) / sens;
    const b = (sg) => -sens / (2 * sg) - (eps * sg) / sens;
    const logDelta = (sg) => {
      const x = eps + pb.logNdtr(b(sg)) - pb.logNdtr(a(sg));
      return pb.logNdtr(a(sg)) + Math.log(-Math.expm1(x));
    };
    assert.ok(logDelta(s) <= Math.log(delta));
    assert.ok(logDelta(s * (1 - 1e-9)) > Math.log(delta), "σ is the smallest");
  }
});

test("Gaussian: the row is the clean vector plus N(0, σ²) noise, under every encoding", () => {
  const c = 0.6;
  for (const enc of ["plain", "frobenius", "centered", "centered-upper"]) {
    const centered = enc.startsWith("centered");
    const rz = new pb.GaussianRandomizer({ d: 3, epsilon: 2, delta: 1e-5, L: 1, encoding: enc,
      u_weight: enc === "plain" ? 1 : 1.5, intercept: centered ? c : undefined });
    const x = centered ? [c, 0.3, -0.5] : [0.2, 0.3, -0.5];
    const clean = rz.clean(x, 0.8);
    assert.equal(clean.length, rz.width);
    // weight √2 off the diagonal for frobenius and centered, w on the reward part
    if (enc === "frobenius") assert.ok(Math.abs(clean[1] - Math.SQRT2 * 0.2 * 0.3) < 1e-15);
    if (centered) assert.ok(Math.abs(clean[6] - 1.5 * (0.8 - 0.5) * c) < 1e-15);
    const n = 8000;
    let s = 0, s2 = 0;
    for (let i = 0; i < n; i++) {
      const row = rz.randomize(x, 0.8);
      row.forEach((v, k) => { const e = (v - clean[k]) / rz.sigma; s += e; s2 += e * e; });
    }
    const N = n * rz.width;
    within(s / N, 0, 1 / Math.sqrt(N), `${enc} mean`);
    within(s2 / N, 1, Math.sqrt(2 / N), `${enc} variance`);
    if (centered) assert.throws(() => rz.randomize([0.5, 0.3, 0], 0.5), /x\[0\]/);
  }
});

test("ddp-linucb: rounding is unbiased, to an adjacent integer, within the norm bound", () => {
  const rz = new pb.DdpRandomizer({ d: 3, scale: 50, L: 1, encoding: "frobenius", u_weight: 1.2 });
  const x = [0.5, -0.4, 0.6], r = 0.7;
  const y = rz.statistics(x, r).map((v) => 50 * v);
  const n = 10000;
  const sum = new Array(rz.n).fill(0);
  for (let i = 0; i < n; i++) {
    const z = rz.rounded(x, r);
    z.forEach((v, k) => {
      assert.ok(v === Math.floor(y[k]) || v === Math.ceil(y[k]));
      sum[k] += v;
    });
    assert.ok(Math.hypot(...z) <= rz.normBound);
  }
  y.forEach((v, k) => within(sum[k] / n, v, 0.5 / Math.sqrt(n), `entry ${k}`));
});

test("ddp-linucb: valid inputs are not clipped; out-of-range r is clipped by statistics, refused by rounded", () => {
  const rz = new pb.DdpRandomizer({ d: 2, scale: 10, L: 2, encoding: "upper" });
  const x = [1.2, -1.6]; // ‖x‖ = 2 = L
  const v = rz.statistics(x, 1);
  const want = [1.44, -1.92, 2.56, 1.2, -1.6];
  v.forEach((e, k) => assert.ok(Math.abs(e - want[k]) < 1e-12));
  assert.throws(() => rz.rounded(x, 1.2), /\[0, 1\]/);
  assert.throws(() => new pb.DdpRandomizer({ d: 2, encoding: "centered" }), /intercept/);
});

test("ddp-linucb: the centered encoding over intercept coordinates E (per-arm features) is the Python's", () => {
  const c = 0.7071067811865476;
  // x[0] = c, as before: the same randomizer with or without the (0,) coordinates stated
  const plain = new pb.DdpRandomizer({ d: 4, encoding: "centered", intercept: c });
  for (const coords of [null, [0]]) {
    const rz = new pb.DdpRandomizer({ d: 4, encoding: "centered", intercept: c, intercept_coords: coords });
    assert.deepEqual([rz.rangeLo, rz.rangeHi], [plain.rangeLo, plain.rangeHi]);
    assert.deepEqual(rz.statistics([c, 0.5, 0.5, 0], 1), plain.statistics([c, 0.5, 0.5, 0], 1));
  }
  // The honest ranges, from skellam.entry_ranges (scale 64, L = 1, c = 1/√2; generated with
  // the Python and pasted): two blocks of 3 (E = {0, 3}, w = 1.5) and three of 2 (E = {0, 2, 4},
  // w = 1) are the plain ranges with h = ½; one coordinate elsewhere, E = {2} (d = 4, w = 1.5),
  // has x₂² = c² and the intercept's ranges about coordinate 2.
  const want = {
    perarm: [[0, 3], 6, 1.5, [0, -46, -46, -46, -46, -46, 0, -46, -46, -46, -46, 0, -46, -46, -46, 0, -46, -46, 0, -46, 0, -48, -48, -48, -48, -48, -48], [64, 46, 46, 46, 46, 46, 64, 46, 46, 46, 46, 64, 46, 46, 46, 64, 46, 46, 64, 46, 64, 48, 48, 48, 48, 48, 48]],
    three: [[0, 2, 4], 6, 1, [0, -46, -46, -46, -46, -46, 0, -46, -46, -46, -46, 0, -46, -46, -46, 0, -46, -46, 0, -46, 0, -32, -32, -32, -32, -32, -32], [64, 46, 46, 46, 46, 46, 64, 46, 46, 46, 46, 64, 46, 46, 46, 64, 46, 46, 64, 46, 64, 32, 32, 32, 32, 32, 32]],
    single2: [[2], 4, 1.5, [0, -23, -46, -23, 0, -46, -23, 32, -46, 0, -34, -34, -34, -34], [32, 23, 46, 23, 32, 46, 23, 33, 46, 32, 34, 34, 34, 34]],
  };
  for (const [name, [coords, d, w, lo, hi]] of Object.entries(want)) {
    const rz = new pb.DdpRandomizer({ d, scale: 64, encoding: "centered", u_weight: w, intercept: c, intercept_coords: coords });
    assert.deepEqual(rz.rangeLo, lo, `${name} lo`);
    assert.deepEqual(rz.rangeHi, hi, `${name} hi`);
  }
  const rz = new pb.DdpRandomizer({ d: 6, scale: 64, encoding: "centered", u_weight: 1.5, intercept: c, intercept_coords: [0, 3] });
  // a per-arm context (arm 1 of 2: c at x[3], x[0] = 0) is accepted; its statistics are the
  // Python's (SkellamRandomizer.statistics; products of the same floats, so equal to the bit)
  const x = [0, 0, 0, c, 0.6, -0.3];
  assert.deepEqual(rz.statistics(x, 0.8), [0.0, 0.0, 0.0, 0.0, 0.0, -0, 0.0, 0.0, 0.0, 0.0, -0, 0.0, 0.0, 0.0, -0, 0.5000000000000001, 0.6000000000000001, -0.30000000000000004, 0.36, -0.2545584412271571, 0.09, 0.0, 0.0, 0.0, 0.3181980515339465, 0.27, -0.135]);
  const z = rz.rounded(x, 0.8);
  z.forEach((v, k) => assert.ok(v >= rz.rangeLo[k] && v <= rz.rangeHi[k], `entry ${k} in range`));
  // the arm-0 context of the same block structure too
  rz.rounded([c, 0.6, -0.3, 0, 0, 0], 0.1);
  // off the hyperplane ⟨e, x⟩ = c (the sum at E, beyond the relative 1e-9): refused, the rule named
  assert.throws(() => rz.rounded([0, 0, 0, c * (1 + 3e-9), 0.6, -0.3], 0.8), /sum of x at coordinates \[0, 3\]/);
  assert.throws(() => rz.rounded([c, 0, 0, c, 0, 0], 0.8), /sum of x at coordinates \[0, 3\]/);
  rz.rounded([0, 0, 0, c * (1 + 5e-10), 0.6, -0.3], 0.8); // within the slack
  // the last guard: a vector off the hyperplane and outside the ball is projected onto
  // {⟨e, x⟩ = c, ‖x‖ ≤ L} (skellam.onto_intercept_direction), statistics as the Python's
  const y = [0.9, 0.6, -0.5, 0.3, 0.5, 0.1];
  const onto = [0.6070996670118287, 0.5070925528371099, -0.42257712736425823, 0.10000711417471886, 0.42257712736425823, 0.08451542547285165];
  // (at r = 1 the reward part is w · ½ · x: the projected x, read back)
  const projected = rz.statistics(y, 1).slice(21).map((v) => v / (1.5 * 0.5));
  close(projected, onto, 1e-15, "projection");
  close(rz.statistics(y, 0.3), [0.3685700056858733, 0.43537373443795285, -0.36281144536496074, 0.08586296628693797, 0.36281144536496074, 0.07256228907299214, 0.25714285714285706, -0.30304576336566313, 0.07171881839915707, 0.30304576336566313, 0.06060915267313263, 0.17857142857142852, -0.05976568199929757, -0.25253813613805265, -0.05050762722761053, 0.010001422885555254, 0.05976568199929757, 0.011953136399859513, 0.17857142857142852, 0.05050762722761053, 0.007142857142857142, -0.18212990010354863, -0.15212776585113297, 0.1267731382092775, -0.030002134252415658, -0.1267731382092775, -0.025354627641855497], 1e-15, "projected statistics");
  // on the hyperplane (the sum at E is c) and on the sphere of radius L
  within(onto[0] + onto[3], c, 1e-15, "⟨e, x⟩");
  within(Math.hypot(...onto), 1, 1e-15, "‖x‖");
  // E is checked as the Python config checks it: increasing indices in [0, d), at least one
  for (const bad of [[3, 0], [0, 0], [0, 6], [-1, 3], [], [0.5], "0"]) {
    assert.throws(() => new pb.DdpRandomizer({ d: 6, encoding: "centered", intercept: c, intercept_coords: bad }),
      /intercept_coords must be increasing indices in \[0, 6\)/, JSON.stringify(bad));
  }
});

function close(got, want, tol, what) {
  assert.equal(got.length, want.length, what);
  got.forEach((v, k) => within(v, want[k], tol, `${what} ${k}`));
}

test("PrivUnit: the browser finds the Python device's (γ, p, m); ε is spent exactly", () => {
  // shared/core/randomizers/privunit.privunit_parameters (scipy's betainc and bounded Brent)
  const ref = [[3, 1, 0.24491867443778798, 0.6224593251848152, 0.2449186624037092],
    [19, 1, 0.09219196955878098, 0.5936130836632467, 0.09219196996845366],
    [20, 0.5, 0.045098387556167775, 0.5472866778345694, 0.04509838554715386],
    [19, 4, 0.3415250049436045, 0.8049530620589912, 0.3415250030810335]];
  for (const [D, eps, gamma, p, m] of ref) {
    const got = pb.privunitParameters(D, eps);
    // m is flat at its maximum: equal to 1e-12; γ and p to the optimisers' tolerance
    assert.ok(Math.abs(got.m - m) <= 1e-12 * m, `m D=${D} ε=${eps}: ${got.m} vs ${m}`);
    assert.ok(Math.abs(got.gamma - gamma) <= 1e-6 && Math.abs(got.p - p) <= 1e-6, `γ, p D=${D}`);
    const q = pb.capFraction(D, got.gamma);
    within(Math.log((got.p * (1 - q)) / ((1 - got.p) * q)), eps, 1e-12 / 5, `ε D=${D}`);
  }
  // I_x(a, b) against scipy.special.betainc(9, 0.5, 0.3) and (1.5, 2, 0.7)
  within(pb.betaInc(9, 0.5, 0.3), 4.274848617941788e-06, 1e-19, "betainc 1");
  within(pb.betaInc(1.5, 2, 0.7), 0.8492099269320862, 1e-15 / 5, "betainc 2");
});

test("PrivUnit: every row lies on the sphere r/m, the cap is hit with probability p, unbiased", () => {
  const c = Math.SQRT1_2;
  const rz = new pb.PrivUnitRandomizer({ d: 5, epsilon: 1, L: 1, encoding: "centered", u_weight: 2, intercept: c });
  assert.equal(rz.D, 19);
  within(rz.norm, 14.349141861107407, 1e-11 / 5, "r/m as the Python device's");
  const n = 6000;
  // ‖x‖ = 1, r ∈ {0, 1}: ‖v_f‖ = r, so û = v_f/‖v_f‖ and ⟨z, û⟩ ≥ γ with probability p.
  const x1 = [c, 0.5, -0.3, 0.1, Math.sqrt(0.5 - 0.35)];
  const clean1 = rz.base.clean(x1, 1);
  const f1 = clean1.slice(1);
  const n1 = Math.sqrt(f1.reduce((s, v) => s + v * v, 0));
  within(n1, rz.radius, 1e-15, "‖v_f‖ = r");
  let inCap = 0;
  for (let i = 0; i < n; i++) {
    const rest = rz.randomize(x1, 1).slice(1);
    if (rest.reduce((s, v, k) => s + (v / rz.norm) * (f1[k] / n1), 0) >= rz.gamma) inCap += 1;
  }
  within(inCap / n, rz.p, Math.sqrt((rz.p * (1 - rz.p)) / n), "P(cap)");
  // ‖x‖ < 1 and r = 0.3 (norm rounding at work): E[row] = clean, the constant entry exact.
  const x = [c, 0.5, -0.3, 0.1, 0.2];
  const clean = rz.base.clean(x, 0.3);
  const sum = new Array(clean.length).fill(0);
  for (let i = 0; i < n; i++) {
    const row = rz.randomize(x, 0.3);
    assert.equal(row[0], clean[0]);
    const norm = Math.sqrt(row.slice(1).reduce((s, v) => s + v * v, 0));
    assert.ok(Math.abs(norm - rz.norm) <= 1e-9 * rz.norm);
    row.forEach((v, k) => { sum[k] += v; });
  }
  // s.e. per entry ≤ (r/m)/√n (an entry of a row on the sphere is at most r/m)
  for (let k = 1; k < clean.length; k++) within(sum[k] / n, clean[k], rz.norm / Math.sqrt(n), `entry ${k}`);
});
