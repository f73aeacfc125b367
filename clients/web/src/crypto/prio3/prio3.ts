/**
 * Prio3 sharding (draft-irtf-cfrg-vdaf-18…20, §7.2.1 and the encodings of §7.2.6), client side,
 * ported from shared/crypto/prio3/prio3.py. The encoded measurement x is split additively,
 * x = x_0 + Σ_{j≥1} x_j, every helper share x_j expanded from a 32-byte seed and the leader's
 * x_0 = x − Σ_j x_j sent in full; likewise each proof. With joint randomness (SumVec, Histogram,
 * MultihotCountVec, SumVecRanges), part_j = XOF(blind_j; j ‖ nonce ‖ x_j),
 * seed = XOF(0; part_0 ‖ … ‖ part_{S−1}), r = XOF(seed); the parts are the public share.
 */
import { Field128, type Field, type FVec } from "./field.js";
import { type Circuit, proofLen, prove, proveRandLen } from "./flp.js";
import { Count, Histogram, MultihotCountVec, Sum, SumVec, SumVecRanges } from "./circuits.js";
import { concatBytes, SEED_SIZE, XofTurboShake128 } from "./xof.js";
import { Field64 } from "./field.js";
import { cryptoRandom, type RandomSource } from "../random.js";

export const VERSION = 18; // the spec's VERSION (drafts 18–20): the first byte of every dst
export const NONCE_SIZE = 16;

const USAGE_MEAS_SHARE = 1;
const USAGE_PROOF_SHARE = 2;
const USAGE_JOINT_RANDOMNESS = 3;
const USAGE_PROVE_RANDOMNESS = 4;
const USAGE_JOINT_RAND_SEED = 6;
const USAGE_JOINT_RAND_PART = 7;

/** Domain separation tag (§6.2.3): VERSION ‖ class ‖ be32(algo) ‖ be16(usage). */
export function formatDst(algoClass: number, algo: number, usage: number): Uint8Array {
  const out = new Uint8Array(8);
  const view = new DataView(out.buffer);
  view.setUint8(0, VERSION);
  view.setUint8(1, algoClass);
  view.setUint32(2, algo >>> 0);
  view.setUint16(6, usage);
  return out;
}

/** The output of `shard`: the public share (the joint-randomness parts, or null) and the
 * encoded input shares (leader's: measurement and proof shares in full, then its blind;
 * each helper's: seed ‖ blind), as §7.2.6 encodes them. */
export interface Sharded {
  publicShare: Uint8Array[] | null;
  leaderMeasShare: FVec;
  leaderProofsShare: FVec;
  encodedPublicShare: Uint8Array;
  encodedInputShares: Uint8Array[];
}

export class Prio3<M> {
  readonly field: Field;
  readonly usesJointRand: boolean;
  readonly randSize: number;
  readonly proofLen: number;
  readonly proveRandLen: number;

  constructor(
    readonly circuit: Circuit<M>,
    readonly id: number,
    readonly shares = 2,
    readonly proofs = 1,
  ) {
    if (!(shares >= 2 && shares < 256)) throw new RangeError("shares must be in [2, 256)");
    if (!(proofs >= 1 && proofs < 256)) throw new RangeError("proofs must be in [1, 256)");
    this.field = circuit.field;
    this.usesJointRand = circuit.jointRandLen > 0;
    this.randSize = SEED_SIZE * shares * (this.usesJointRand ? 2 : 1);
    this.proofLen = proofLen(circuit);
    this.proveRandLen = proveRandLen(circuit);
  }

  private dst(usage: number, ctx: Uint8Array): Uint8Array {
    return concatBytes(formatDst(0, this.id, usage), ctx);
  }

  private helperMeasShare(ctx: Uint8Array, aggId: number, seed: Uint8Array): FVec {
    return XofTurboShake128.expandIntoVec(
      this.field, seed, this.dst(USAGE_MEAS_SHARE, ctx), new Uint8Array([aggId]),
      this.circuit.measLen,
    );
  }

  private helperProofsShare(ctx: Uint8Array, aggId: number, seed: Uint8Array): FVec {
    return XofTurboShake128.expandIntoVec(
      this.field, seed, this.dst(USAGE_PROOF_SHARE, ctx), new Uint8Array([this.proofs, aggId]),
      this.proofLen * this.proofs,
    );
  }

  private jointRandPart(
    ctx: Uint8Array, aggId: number, blind: Uint8Array, measShare: FVec, nonce: Uint8Array,
  ): Uint8Array {
    return XofTurboShake128.deriveSeed(
      blind, this.dst(USAGE_JOINT_RAND_PART, ctx),
      concatBytes(new Uint8Array([aggId]), nonce, this.field.encodeVec(measShare)),
    );
  }

  /** Shard a measurement: `rand` (randSize bytes) from the CSPRNG unless given (vectors). */
  shard(ctx: Uint8Array, measurement: M, nonce: Uint8Array, rand?: Uint8Array,
        random: RandomSource = cryptoRandom): Sharded {
    return this.shardEncoded(ctx, this.circuit.encode(measurement), nonce, rand, random);
  }

  /** `shard` of an already encoded measurement, valid or not (tests forge invalid ones). */
  shardEncoded(ctx: Uint8Array, meas: FVec, nonce: Uint8Array, rand?: Uint8Array,
               random: RandomSource = cryptoRandom): Sharded {
    const f = this.field;
    if (nonce.length !== NONCE_SIZE) throw new RangeError("incorrect nonce size");
    if (meas.length !== this.circuit.measLen) throw new RangeError("encoded measurement of the wrong length");
    const r = rand ?? random(this.randSize);
    if (r.length !== this.randSize) throw new RangeError("incorrect size of random bytes argument");
    const seeds: Uint8Array[] = [];
    for (let i = 0; i < this.randSize; i += SEED_SIZE) seeds.push(r.slice(i, i + SEED_SIZE));
    const s = this.shares;
    let helperShares: Uint8Array[];
    let helperBlinds: Uint8Array[] = [];
    let leaderBlind: Uint8Array = new Uint8Array(0);
    let proveSeed: Uint8Array;
    if (this.usesJointRand) {
      const hs = seeds.slice(0, 2 * (s - 1));
      helperShares = hs.filter((_, i) => i % 2 === 0);
      helperBlinds = hs.filter((_, i) => i % 2 === 1);
      leaderBlind = seeds[2 * (s - 1)]!;
      proveSeed = seeds[2 * (s - 1) + 1]!;
    } else {
      helperShares = seeds.slice(0, s - 1);
      proveSeed = seeds[s - 1]!;
    }

    let leaderMeas = meas.map((x) => f.of(x));
    const parts: Uint8Array[] = [];
    for (let j = 0; j < s - 1; j++) {
      const share = this.helperMeasShare(ctx, j + 1, helperShares[j]!);
      leaderMeas = leaderMeas.map((x, i) => f.sub(x, share[i]!));
      if (this.usesJointRand) parts.push(this.jointRandPart(ctx, j + 1, helperBlinds[j]!, share, nonce));
    }
    if (this.usesJointRand) parts.unshift(this.jointRandPart(ctx, 0, leaderBlind, leaderMeas, nonce));

    const proveRands = XofTurboShake128.expandIntoVec(
      f, proveSeed, this.dst(USAGE_PROVE_RANDOMNESS, ctx), new Uint8Array([this.proofs]),
      this.proveRandLen * this.proofs,
    );
    let jointRands: FVec = [];
    if (this.usesJointRand) {
      const seed = XofTurboShake128.deriveSeed(
        new Uint8Array(SEED_SIZE), this.dst(USAGE_JOINT_RAND_SEED, ctx), concatBytes(...parts),
      );
      jointRands = XofTurboShake128.expandIntoVec(
        f, seed, this.dst(USAGE_JOINT_RANDOMNESS, ctx), new Uint8Array([this.proofs]),
        this.circuit.jointRandLen * this.proofs,
      );
    }
    const prl = this.proveRandLen;
    const jrl = this.circuit.jointRandLen;
    let leaderProofs: FVec = [];
    for (let k = 0; k < this.proofs; k++) {
      leaderProofs.push(...prove(
        this.circuit, meas.map((x) => f.of(x)), proveRands.slice(k * prl, (k + 1) * prl),
        jointRands.slice(k * jrl, (k + 1) * jrl),
      ));
    }
    for (let j = 0; j < s - 1; j++) {
      const share = this.helperProofsShare(ctx, j + 1, helperShares[j]!);
      leaderProofs = leaderProofs.map((x, i) => f.sub(x, share[i]!));
    }
    const encodedInputShares = [
      concatBytes(f.encodeVec(leaderMeas), f.encodeVec(leaderProofs), leaderBlind),
      ...helperShares.map((seed, j) =>
        concatBytes(seed, this.usesJointRand ? helperBlinds[j]! : new Uint8Array(0))),
    ];
    return {
      publicShare: this.usesJointRand ? parts : null,
      leaderMeasShare: leaderMeas,
      leaderProofsShare: leaderProofs,
      encodedPublicShare: concatBytes(...parts),
      encodedInputShares,
    };
  }
}

// -- the variants (§7.4) and their codepoints (§10) ---------------------------------------------

export function prio3Count(shares = 2): Prio3<number> {
  return new Prio3(new Count(Field64), 0x00000001, shares);
}

export function prio3Sum(maxMeasurement: number, shares = 2): Prio3<number> {
  return new Prio3(new Sum(Field64, maxMeasurement), 0x00000002, shares);
}

export function prio3SumVec(
  length: number, maxMeasurement: number, chunkLength: number, shares = 2,
): Prio3<readonly number[]> {
  return new Prio3(new SumVec(Field128, length, maxMeasurement, chunkLength), 0x00000003, shares);
}

export function prio3Histogram(length: number, chunkLength: number, shares = 2): Prio3<number> {
  return new Prio3(new Histogram(Field128, length, chunkLength), 0x00000004, shares);
}

export function prio3MultihotCountVec(
  length: number, maxWeight: number, chunkLength: number, shares = 2,
): Prio3<readonly boolean[]> {
  return new Prio3(new MultihotCountVec(Field128, length, maxWeight, chunkLength), 0x00000005, shares);
}

/** SumVec over a chosen field with several proofs: the reference implementation's experimental
 * "Prio3SumVecWithMultiproof" (ID 0xFFFFFFFF). */
export function prio3SumVecMultiproof(
  field: Field, proofs: number, length: number, maxMeasurement: number, chunkLength: number,
  shares = 2,
): Prio3<readonly number[]> {
  return new Prio3(new SumVec(field, length, maxMeasurement, chunkLength), 0xffffffff, shares, proofs);
}

/** The private codepoint of SumVecRanges (draft-irtf-cfrg-vdaf §10: 0xFFFF0000 and above are
 * not registered; shared/crypto/prio3/prio3.py SUM_VEC_RANGES_ID). */
export const SUM_VEC_RANGES_ID = 0xffff5253;

/** Prio3 over SumVecRanges (entry i in [0, maxima[i]]): Field128, one proof. */
export function prio3SumVecRanges(
  maxima: readonly number[], chunkLength: number, shares = 2,
): Prio3<readonly number[]> {
  return new Prio3(new SumVecRanges(Field128, maxima, chunkLength), SUM_VEC_RANGES_ID, shares);
}

/** A ParallelSum chunk length near √(encoded length) (§7.4.3.1; Python's chunk_length_for:
 * max(1, round(√n)), round half to even). */
export function chunkLengthFor(measLen: number): number {
  const x = Math.sqrt(measLen);
  const fl = Math.floor(x);
  const diff = x - fl;
  let r: number;
  if (diff > 0.5) r = fl + 1;
  else if (diff < 0.5) r = fl;
  else r = fl % 2 === 0 ? fl : fl + 1;
  return Math.max(1, r);
}
