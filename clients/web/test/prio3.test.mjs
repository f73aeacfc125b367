// The per-entry-range generalisation of SumVec (ddp-design.md) and the project's task layer:
// RangeVec with equal maxima is SumVec byte for byte; per-entry maxima bit-decompose each
// entry with its own weights; TaskVdaf measures v − lo and refuses values out of range.
import { test } from "node:test";
import assert from "node:assert/strict";

import * as pb from "../dist/privbandit.js";

const hex = (b) => Buffer.from(b).toString("hex");
const seq = (n, start = 0) => new Uint8Array(n).map((_, i) => (start + i) & 255);

test("RangeVec with equal maxima shards exactly as SumVec", () => {
  const ctx = new TextEncoder().encode("task-a");
  const sumvec = pb.prio3SumVec(6, 13, 5);
  const range = pb.prio3RangeVec(new Array(6).fill(13), 5, 3);
  const meas = [0, 13, 7, 8, 1, 12];
  const a = sumvec.shard(ctx, meas, seq(16), seq(sumvec.randSize, 7));
  const b = range.shard(ctx, meas, seq(16), seq(range.randSize, 7));
  assert.equal(hex(a.encodedPublicShare), hex(b.encodedPublicShare));
  assert.deepEqual(a.encodedInputShares.map(hex), b.encodedInputShares.map(hex));
});

test("RangeVec encodes each entry with its own maximum's range-check bits", () => {
  const c = new pb.RangeVec(pb.Field128, [1, 5, 300], 4);
  assert.equal(c.measLen, 1 + 3 + 9);
  // max 5: weights 1, 2, 2, so 5 = 1 + 2 + 2; max 300: weights 1 … 128, 45, so 300 = 255 + 45
  assert.deepEqual(c.encode([1, 5, 300]).map(Number), [1, 1, 1, 1, ...[1, 1, 1, 1, 1, 1, 1, 1, 1]]);
  assert.throws(() => c.encode([2, 0, 0]), /outside \[0, 1\]/);
  assert.throws(() => c.encode([0, 0]), /entries/);
});

test("TaskVdaf: v − lo per entry; SumVec for equal ranges, RangeVec under its codepoint otherwise", () => {
  const t = new pb.TaskVdaf("t", [-3, 0, -10], [3, 6, 10], 0xfffe0001);
  assert.deepEqual(t.measurement([-3, 6, 0]), [0, 6, 10]);
  assert.throws(() => t.measurement([4, 0, 0]), /outside its range/);
  assert.throws(() => t.measurement([0.5, 0, 0]), /outside its range/);
  assert.throws(() => new pb.TaskVdaf("t", [-3, 0], [3, 5]), /codepoint/);
  const u = pb.TaskVdaf.uniform("t", 20, 0, 3);
  assert.equal(u.vdaf.id, 3);
  assert.equal(u.vdaf.circuit.measLen, 40);
  assert.equal(u.vdaf.circuit.chunkLength, pb.chunkLengthFor(40));
});

test("chunkLengthFor rounds √n half to even, as Python's round", () => {
  assert.deepEqual([1, 2, 4, 6, 7, 12, 30, 100, 2.25 ** 2].map(pb.chunkLengthFor), [1, 1, 2, 2, 3, 3, 5, 10, 2]);
});

test("makePrio3Report: the wire fields and their lengths", async () => {
  const publicKey = seq(32, 9); // any 32 bytes are an X25519 public key
  const vdaf = pb.TaskVdaf.uniform("demo", 5, 0, 2);
  const rep = await pb.makePrio3Report(vdaf, [0, 1, 2, 1, 0], { keyId: 7, publicKey }, 10);
  assert.equal(pb.b64decode(rep.nonce).length, 16);
  assert.equal(pb.b64decode(rep.public_share).length, 64);
  const v = vdaf.vdaf;
  assert.equal(pb.b64decode(rep.leader_share).length, 16 * (v.circuit.measLen + v.proofLen) + 32);
  assert.equal(pb.b64decode(rep.helper_share.ct).length, 128);
  assert.equal(rep.helper_share.key_id, 7);
  assert.equal(rep.batch_size, 10);
});
