// SumVec generalised to one maximum per entry (SumVecRanges, issue 40) and the project's task
// layer: SumVecRanges with equal maxima is SumVec byte for byte; per-entry maxima bit-decompose
// each entry with its own weights, zero-padded to the longest; TaskVdaf measures v − lo and
// refuses values out of range. (Byte equality with Python's SumVecRanges: the interop tests.)
import { test } from "node:test";
import assert from "node:assert/strict";

import * as pb from "../dist/privbandit.js";

const hex = (b) => Buffer.from(b).toString("hex");
const seq = (n, start = 0) => new Uint8Array(n).map((_, i) => (start + i) & 255);

test("SumVecRanges with equal maxima shards exactly as SumVec (under SumVec's codepoint)", () => {
  const ctx = new TextEncoder().encode("task-a");
  const sumvec = pb.prio3SumVec(6, 13, 5);
  const ranges = new pb.Prio3(new pb.SumVecRanges(pb.Field128, new Array(6).fill(13), 5), 3);
  const meas = [0, 13, 7, 8, 1, 12];
  const a = sumvec.shard(ctx, meas, seq(16), seq(sumvec.randSize, 7));
  const b = ranges.shard(ctx, meas, seq(16), seq(ranges.randSize, 7));
  assert.equal(hex(a.encodedPublicShare), hex(b.encodedPublicShare));
  assert.deepEqual(a.encodedInputShares.map(hex), b.encodedInputShares.map(hex));
});

test("SumVecRanges encodes each entry with its own maximum's bits, zero-padded to the longest", () => {
  const c = new pb.SumVecRanges(pb.Field128, [1, 5, 300], 4);
  assert.equal(c.bits, 9);
  assert.equal(c.measLen, 27);
  // max 1: one bit; max 5: weights 1, 2, 2, so 5 = 1 + 2 + 2; max 300: weights 1 … 128, 45
  const pad = (bits) => [...bits, ...new Array(9 - bits.length).fill(0)];
  assert.deepEqual(c.encode([1, 5, 300]).map(Number), [...pad([1]), ...pad([1, 1, 1]), 1, 1, 1, 1, 1, 1, 1, 1, 1]);
  assert.deepEqual(c.encode([0, 3, 45]).map(Number), [...pad([0]), ...pad([1, 1, 0]), 1, 0, 1, 1, 0, 1, 0, 0, 0]);
  assert.throws(() => c.encode([2, 0, 0]), /outside \[0, 1\]/);
  assert.throws(() => c.encode([0, 0]), /entries/);
});

test("TaskVdaf: v − lo per entry; SumVec for one range, SumVecRanges (private codepoint) per entry", () => {
  const t = pb.TaskVdaf.ranges("t", [-3, 0, -10, 4], [3, 6, 10, 4]);
  assert.equal(t.vdaf.id, pb.SUM_VEC_RANGES_ID);
  assert.deepEqual(t.maxima, [6, 6, 20, 1]); // a one-integer range still gets one bit
  assert.deepEqual(t.measurement([-3, 6, 0, 4]), [0, 6, 10, 0]);
  assert.throws(() => t.measurement([4, 0, 0, 4]), /outside its range/);
  assert.throws(() => t.measurement([0.5, 0, 0, 4]), /outside its range/);
  assert.equal(t.vdaf.circuit.chunkLength, pb.chunkLengthFor(4 * 5));
  const u = pb.TaskVdaf.uniform("t", 20, 0, 3);
  assert.equal(u.vdaf.id, 3);
  assert.equal(u.vdaf.circuit.measLen, 40);
  assert.equal(u.vdaf.circuit.chunkLength, pb.chunkLengthFor(40));
});

test("ddp-linucb's honest ranges contain every rounded report, and clip-and-round stays inside", () => {
  for (const params of [{ d: 3, scale: 64 }, { d: 3, scale: 64, encoding: "frobenius", u_weight: 1.5 },
    { d: 3, scale: 64, encoding: "centered", u_weight: 1.5, intercept: 0.6 }]) {
    const rz = new pb.DdpRandomizer(params);
    const vdaf = rz.taskVdaf("ddp");
    const c = params.intercept;
    for (let i = 0; i < 300; i++) {
      // extreme points of the ball: unit directions, rewards at the ends
      const a = 0.1 + 0.37 * i;
      const dir = [Math.cos(a), Math.sin(a) * Math.cos(3 * a), Math.sin(a) * Math.sin(3 * a)];
      const x = c === undefined ? dir
        : [c, ...[dir[1], dir[2]].map((v) => (v * Math.sqrt(1 - c * c)) / Math.hypot(dir[1], dir[2]))];
      const z = rz.rounded(x, i % 3 === 0 ? 1 : i % 3 === 1 ? 0 : 0.5);
      vdaf.measurement(z); // throws if any entry is outside its range
    }
  }
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
