/**
 * Report plaintexts and uploads (docs/protocol.md §3.3 and §5.5; shared/crypto/hpke.py,
 * shared/crypto/prio3_task.py, services/device/transports/prio3.py).
 *
 * - `reports` transport: plaintext = a fresh 16-byte report id ‖ the randomizer's row, sealed
 *   with HPKE (`sealRow`). Rows: little-endian float64 (`float64Row`; ldp-linucb), or the 0/1
 *   randomizer's bits packed MSB first, zero-padded to a byte (`packBits`; sblb).
 * - `prio3` transport (secure-sum tasks): the report's values as a Prio3 measurement (v − lo per
 *   entry), sharded under ctx = the task id with a fresh 16-byte nonce (the report id); the
 *   helper share HPKE-sealed (purpose `prio3-helper`) as nonce ‖ SHA-256("privbandit/prio3-
 *   public-share|" ‖ public share) ‖ helper share (`makePrio3Report`).
 */
import { sha256 } from "@noble/hashes/sha2.js";

import { cryptoRandom, type RandomSource } from "./random.js";
import { type EncryptedReport, b64encode, seal } from "./hpke.js";
import {
  chunkLengthFor,
  NONCE_SIZE,
  Prio3,
  prio3SumVec,
  prio3SumVecRanges,
} from "./prio3/prio3.js";
import { concatBytes } from "./prio3/xof.js";

export const REPORT_ID_BYTES = 16;
export const HELPER_PURPOSE = "prio3-helper";

/** The analyzer's HPKE key as a client holds it (from `GET /v1/hpke-config`). */
export interface HpkeKey {
  keyId: number;
  publicKey: Uint8Array;
}

/** A row of float64 values, little-endian (the `ldp-linucb`, central and identity rows). */
export function float64Row(values: readonly number[]): Uint8Array {
  const out = new Uint8Array(8 * values.length);
  const view = new DataView(out.buffer);
  values.forEach((v, i) => {
    if (!Number.isFinite(v)) throw new RangeError("report values must be finite");
    view.setFloat64(8 * i, v, true);
  });
  return out;
}

/** 0/1 bits packed MSB first (bit i is 0x80 >> (i mod 8) of byte ⌊i/8⌋), zero-padded. */
export function packBits(bits: readonly number[]): Uint8Array {
  const out = new Uint8Array(Math.ceil(bits.length / 8));
  bits.forEach((b, i) => {
    if (b !== 0 && b !== 1) throw new RangeError("a bit is 0 or 1");
    if (b) out[i >> 3]! |= 0x80 >> (i & 7);
  });
  return out;
}

/** Seal one row for the `reports` transport: a fresh report id from the CSPRNG ‖ row. */
export async function sealRow(
  key: HpkeKey,
  task: string,
  row: Uint8Array,
  random: RandomSource = cryptoRandom,
): Promise<{ reportId: Uint8Array; report: EncryptedReport }> {
  const reportId = random(REPORT_ID_BYTES);
  const report = await seal(key.publicKey, key.keyId, task, concatBytes(reportId, row));
  return { reportId, report };
}

/** A secure-sum task's Prio3 parameters (shared/crypto/prio3_task.py TaskVdaf): one range
 * [lo_i, hi_i] per value, the measurement v_i − lo_i. `uniform`: every value in one range,
 * Prio3SumVec (codepoint 3: sblb's counts in [0, m]); `ranges`: one range per value,
 * SumVecRanges (ddp-linucb's honest ranges, issue 40). The chunk length is
 * round(√(length · bits)) in both, bits the longest entry's. */
export class TaskVdaf {
  readonly vdaf: Prio3<readonly number[]>;
  readonly lo: readonly number[];
  readonly maxima: readonly number[];

  private constructor(readonly task: string, lo: readonly number[], maxima: readonly number[],
                      perEntry: boolean) {
    if (lo.length !== maxima.length || lo.length < 1) throw new RangeError("one range per value");
    if (!maxima.every((m) => Number.isSafeInteger(m) && m >= 1) || !lo.every(Number.isSafeInteger)) {
      throw new RangeError("every range is [lo, hi] with integers, hi − lo at least 1");
    }
    this.lo = lo.slice();
    this.maxima = maxima.slice();
    const bits = Math.max(...maxima.map((m) => m.toString(2).length));
    const chunk = chunkLengthFor(maxima.length * bits);
    this.vdaf = perEntry
      ? prio3SumVecRanges(this.maxima, chunk)
      : prio3SumVec(this.maxima.length, this.maxima[0]!, chunk);
  }

  /** Every value in [lo, hi]: Prio3SumVec(length, hi − lo). */
  static uniform(task: string, length: number, lo: number, hi: number): TaskVdaf {
    return new TaskVdaf(task, new Array<number>(length).fill(lo), new Array<number>(length).fill(hi - lo),
      false);
  }

  /** Value i in [lo[i], hi[i]]: SumVecRanges with maxima max(1, hi − lo), as prio3_task.task_vdaf
   * (a range of one integer still gets one bit). */
  static ranges(task: string, lo: readonly number[], hi: readonly number[]): TaskVdaf {
    if (lo.length !== hi.length) throw new RangeError("one range per value");
    return new TaskVdaf(task, lo, hi.map((h, i) => Math.max(1, h - lo[i]!)), true);
  }

  get ctx(): Uint8Array {
    return new TextEncoder().encode(this.task);
  }

  /** The Prio3 measurement v − lo, refused (RangeError) outside the ranges. */
  measurement(values: readonly number[]): number[] {
    if (values.length !== this.lo.length) {
      throw new RangeError(`task ${this.task}: ${values.length} values, not ${this.lo.length}`);
    }
    return values.map((v, i) => {
      const m = v - this.lo[i]!;
      if (!(Number.isSafeInteger(m) && m >= 0 && m <= this.maxima[i]!)) {
        throw new RangeError(`task ${this.task}: value ${i} = ${v} outside its range`);
      }
      return m;
    });
  }
}

/** Prio3Report on the wire (shared/protocol/prio3.py). */
export interface Prio3Report {
  nonce: string;
  public_share: string;
  leader_share: string;
  helper_share: EncryptedReport;
  batch_size?: number;
}

export function publicShareDigest(publicShare: Uint8Array): Uint8Array {
  return sha256(concatBytes(new TextEncoder().encode("privbandit/prio3-public-share|"), publicShare));
}

/** Options for tests and vectors only: fixed nonce, Prio3 rand and HPKE ephemeral key. */
export interface Prio3TestInputs {
  nonce?: Uint8Array;
  rand?: Uint8Array;
  ephemeral?: Uint8Array;
}

/** One prio3 report of `values` (module doc): the nonce and the sharding's randomness from the
 * CSPRNG. `batchSize`: the batch length the report is sized for, when the task states one. */
export async function makePrio3Report(
  vdaf: TaskVdaf,
  values: readonly number[],
  key: HpkeKey,
  batchSize?: number,
  random: RandomSource = cryptoRandom,
  test: Prio3TestInputs = {},
): Promise<Prio3Report> {
  const nonce = test.nonce ?? random(NONCE_SIZE);
  const out = vdaf.vdaf.shard(vdaf.ctx, vdaf.measurement(values), nonce, test.rand, random);
  const [leader, helper] = out.encodedInputShares as [Uint8Array, Uint8Array];
  const plaintext = concatBytes(nonce, publicShareDigest(out.encodedPublicShare), helper);
  const sealed = await seal(key.publicKey, key.keyId, vdaf.task, plaintext, HELPER_PURPOSE,
    test.ephemeral);
  return {
    nonce: b64encode(nonce),
    public_share: b64encode(out.encodedPublicShare),
    leader_share: b64encode(leader),
    helper_share: sealed,
    ...(batchSize === undefined ? {} : { batch_size: batchSize }),
  };
}
