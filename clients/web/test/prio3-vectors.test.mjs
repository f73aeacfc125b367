// The VDAF draft's published Prio3 vectors (tests/shared/crypto/prio3/vectors, README there:
// source and licence), byte for byte on the client side: for every report of every variant, the
// library's shard of the vector's measurement, nonce and rand gives the vector's public share
// and input shares; and the TurboSHAKE128 XOF vector.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { fileURLToPath } from "node:url";

import * as pb from "../dist/privbandit.js";

const VECTORS = fileURLToPath(new URL("../../../tests/shared/crypto/prio3/vectors/", import.meta.url));
const hex = (b) => Buffer.from(b).toString("hex");
const bytes = (h) => new Uint8Array(Buffer.from(h, "hex"));

function instantiate(kind, tv) {
  const s = tv.shares;
  switch (kind) {
    case "Prio3Count": return pb.prio3Count(s);
    case "Prio3Sum": return pb.prio3Sum(tv.max_measurement, s);
    case "Prio3SumVec": return pb.prio3SumVec(tv.length, tv.max_measurement, tv.chunk_length, s);
    // poc/gen_test_vec.py: Prio3SumVecWithMultiproof(shares, Field64, 3, ...)
    case "Prio3SumVecWithMultiproof":
      return pb.prio3SumVecMultiproof(pb.Field64, 3, tv.length, tv.max_measurement, tv.chunk_length, s);
    case "Prio3Histogram": return pb.prio3Histogram(tv.length, tv.chunk_length, s);
    case "Prio3MultihotCountVec":
      return pb.prio3MultihotCountVec(tv.length, tv.max_weight, tv.chunk_length, s);
    default: throw new Error(kind);
  }
}

const files = readdirSync(VECTORS).filter((n) => n.startsWith("Prio3") && !n.includes("_bad_"));

test("every variant the draft publishes has its vectors here", () => {
  const kinds = new Set(files.map((n) => n.replace(/_\d+\.json$/, "")));
  assert.deepEqual([...kinds].sort(), ["Prio3Count", "Prio3Histogram", "Prio3MultihotCountVec",
    "Prio3Sum", "Prio3SumVec", "Prio3SumVecWithMultiproof"]);
});

for (const name of files) {
  test(`shard reproduces ${name}`, () => {
    const tv = JSON.parse(readFileSync(VECTORS + name, "utf8"));
    const vdaf = instantiate(name.replace(/_\d+\.json$/, ""), tv);
    assert.ok(tv.reports.length >= 1);
    for (const r of tv.reports) {
      const out = vdaf.shard(bytes(tv.ctx), r.measurement, bytes(r.nonce), bytes(r.rand));
      assert.equal(hex(out.encodedPublicShare), r.public_share);
      assert.deepEqual(out.encodedInputShares.map(hex), r.input_shares);
    }
  });
}

test("XofTurboShake128 vector: derived seed and expanded Field128 vector", () => {
  const tv = JSON.parse(readFileSync(VECTORS + "XofTurboShake128.json", "utf8"));
  const seed = pb.XofTurboShake128.deriveSeed(bytes(tv.seed), bytes(tv.dst), bytes(tv.binder));
  assert.equal(hex(seed), tv.derived_seed);
  const vec = pb.XofTurboShake128.expandIntoVec(pb.Field128, bytes(tv.seed), bytes(tv.dst),
    bytes(tv.binder), Number(tv.length));
  assert.equal(hex(pb.Field128.encodeVec(vec)), tv.expanded_vec_field128);
});
