// Randomness: every source is crypto.getRandomValues (no Math.random in src/ or in the bundle),
// and the exact Bernoulli is exact — over all 2^k equally likely bit strings its output is 1 for
// exactly num of them when p = num/2^k.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync, statSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { join } from "node:path";

import * as pb from "../dist/privbandit.js";

const ROOT = fileURLToPath(new URL("..", import.meta.url));

function files(dir) {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    return statSync(p).isDirectory() ? files(p) : [p];
  });
}

test("no Math.random in src/ or in the bundles", () => {
  const scanned = [...files(join(ROOT, "src")), join(ROOT, "dist/privbandit.js"), join(ROOT, "dist/privbandit.min.js")];
  assert.ok(scanned.length > 10);
  for (const f of scanned) {
    assert.doesNotMatch(readFileSync(f, "utf8"), /Math\s*\.\s*random|Math\[["']random/, f);
  }
  // and the minified bundle does reach the Web Crypto CSPRNG
  assert.match(readFileSync(join(ROOT, "dist/privbandit.min.js"), "utf8"), /getRandomValues/);
});

test("dyadic gives p = num / 2^k exactly, k minimal", () => {
  for (const p of [0.5, 0.25, 0.75, 0.1, 1 / 3, 2 ** -60, 5e-324, 1, 0.9999999999999999]) {
    const { num, k } = pb.dyadic(p);
    assert.equal(Number(num) * 2 ** -k, p);
    if (k > 0) assert.equal(num % 2n, 1n);
  }
  assert.deepEqual(pb.dyadic(0), { num: 0n, k: 0 });
});

/** A bit stream that plays one fixed bit string (then zeros). */
function fixedBits(bitsList) {
  const bytes = new Uint8Array(64);
  bitsList.forEach((b, i) => { if (b) bytes[i >> 3] |= 0x80 >> (i & 7); });
  let used = false;
  return new pb.BitStream((n) => {
    assert.equal(used, false, "exactBernoulli read more than one refill");
    used = true;
    return bytes.slice(0, n);
  });
}

test("exactBernoulli is exact: 1 on exactly num of the 2^k bit strings", () => {
  for (const p of [0.5, 0.3125, 0.6875, 0.1328125, 1 - 2 ** -10, 2 ** -10]) {
    const { num, k } = pb.dyadic(p);
    let ones = 0;
    for (let s = 0; s < 2 ** k; s++) {
      const bitsList = [...Array(k)].map((_, i) => (s >> (k - 1 - i)) & 1);
      ones += pb.exactBernoulli(p, fixedBits(bitsList));
    }
    assert.equal(BigInt(ones), num, `p = ${p}`);
  }
  assert.equal(pb.exactBernoulli(0, new pb.BitStream()), 0);
  assert.equal(pb.exactBernoulli(1, new pb.BitStream()), 1);
  assert.throws(() => pb.exactBernoulli(1.5, new pb.BitStream()));
});

test("exactBernoulli from the CSPRNG: frequency within 5 standard errors", () => {
  const bits = new pb.BitStream();
  const n = 200000;
  for (const p of [0.1, 0.5, 0.987]) {
    let ones = 0;
    for (let i = 0; i < n; i++) ones += pb.exactBernoulli(p, bits);
    const se = Math.sqrt((p * (1 - p)) / n);
    assert.ok(Math.abs(ones / n - p) < 5 * se, `p = ${p}: ${ones / n}`);
  }
});

test("normalPair: mean 0, variance 1 within 5 standard errors", () => {
  const bits = new pb.BitStream();
  const n = 100000;
  let s = 0, s2 = 0, s4 = 0;
  for (let i = 0; i < n / 2; i++) {
    for (const z of pb.normalPair(bits)) { s += z; s2 += z * z; s4 += z ** 4; }
  }
  assert.ok(Math.abs(s / n) < 5 / Math.sqrt(n));
  assert.ok(Math.abs(s2 / n - 1) < 5 * Math.sqrt(2 / n));
  assert.ok(Math.abs(s4 / n - 3) < 5 * Math.sqrt(96 / n)); // Var z⁴ = 105 − 9
});
