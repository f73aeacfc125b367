/**
 * The validity circuits of Prio3's variants (draft-irtf-cfrg-vdaf-18…20, §7.4), prover side,
 * ported from shared/crypto/prio3/circuits.py: Count (§7.4.1), Sum (§7.4.2), SumVec (§7.4.3),
 * Histogram (§7.4.4), MultihotCountVec (§7.4.5), and `SumVecRanges`, SumVec generalised to one
 * maximum per entry (privbandit's, issue 40: shared/crypto/prio3/circuits.py SumVecRanges):
 * every entry gets b = max_i bitlen(M_i) encoded elements, the draft's range-checked encoding
 * of v_i ∈ [0, M_i] followed by b − bitlen(M_i) zero-weight elements an honest client sets to 0;
 * the bit check is SumVec's, so the predicate is exactly "v_i ∈ [0, M_i] for every i". SumVec is
 * the SumVecRanges whose maxima are all equal, element for element.
 *
 * Range-checked integers (§7.4.2): v ∈ [0, B] with b = bitlen(B) is written as b bits with
 * weights 1, 2, …, 2^(b−2), B − (2^(b−1) − 1): if v ≤ 2^(b−1) − 1 its b − 1 low bits and a last
 * bit 0, else the b − 1 low bits of v − w_last and a last bit 1.
 *
 * The bit check (§7.4.3, [BBCGGI19] Thm 5.2): the encoded bits x, zero-padded to calls · chunk,
 * are cut into chunks; call i of ParallelSum(Mul, chunk) gets the pairs
 * (r_i^(j+1) x_ij, x_ij − 1/num_shares), so its output is Σ_j r_i^(j+1) x_ij (x_ij − 1).
 */
import { type Field, type FVec } from "./field.js";
import { type Circuit, type Gadget, Mul, ParallelSum, PolyEval } from "./flp.js";

function bitLength(n: number): number {
  return n <= 0 ? 0 : Math.floor(Math.log2(n)) + 1;
}

function checkInt(value: unknown, max: number): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value)) {
    throw new RangeError(`measurement entry ${String(value)} is not an integer`);
  }
  if (value < 0 || value > max) throw new RangeError(`measurement entry ${value} outside [0, ${max}]`);
  return value;
}

/** The weights of the modified bit decomposition of [0, max] (§7.4.2). */
export function rangeCheckWeights(max: number): number[] {
  if (!Number.isSafeInteger(max) || max < 1) throw new RangeError("a maximum must be a positive integer");
  const bits = bitLength(max);
  const rest = 2 ** (bits - 1) - 1;
  const out: number[] = [];
  for (let l = 0; l < bits - 1; l++) out.push(2 ** l);
  out.push(max - rest);
  return out;
}

/** The 0/1 encoding of v ∈ [0, max] (§7.4.2). */
export function encodeRangeCheckedInt(value: number, max: number): number[] {
  const bits = bitLength(max);
  const restAllOnes = 2 ** (bits - 1) - 1;
  let rest = value;
  let last = 0;
  if (value > restAllOnes) {
    rest = value - (max - restAllOnes);
    last = 1;
  }
  const out: number[] = [];
  for (let l = 0; l < bits - 1; l++) out.push(Math.floor(rest / 2 ** l) % 2);
  out.push(last);
  return out;
}

/** Inputs (calls × 2·chunk) of the ParallelSum(Mul, chunk) calls checking that `bits` are 0/1. */
function bitCheckInputs(
  field: Field,
  bits: FVec,
  jointRand: FVec,
  chunk: number,
  calls: number,
  numShares: number,
): FVec[] {
  const sharesInv = field.invSmall(numShares);
  const out: FVec[] = [];
  for (let i = 0; i < calls; i++) {
    const r = jointRand[i]!;
    let power = 1n;
    const row: FVec = [];
    for (let j = 0; j < chunk; j++) {
      const x = bits[i * chunk + j] ?? 0n;
      power = field.mul(power, r);
      row.push(field.mul(power, x), field.sub(x, sharesInv));
    }
    out.push(row);
  }
  return out;
}

/** Count: x ∈ {0, 1}, C(x) = Mul(x, x) − x (§7.4.1). */
export class Count implements Circuit<number> {
  readonly measLen = 1;
  readonly jointRandLen = 0;
  readonly gadgets: Gadget[] = [new Mul()];
  readonly gadgetCalls = [1];

  constructor(readonly field: Field) {}

  encode(measurement: number): FVec {
    return [BigInt(checkInt(measurement, 1))];
  }

  gadgetInputs(meas: FVec): FVec[][] {
    return [[[meas[0]!, meas[0]!]]];
  }
}

/** Sum: v ∈ [0, max] as range-checked bits, each checked by PolyEval(x² − x) (§7.4.2). */
export class Sum implements Circuit<number> {
  readonly measLen: number;
  readonly jointRandLen = 0;
  readonly gadgets: Gadget[];
  readonly gadgetCalls: number[];

  constructor(
    readonly field: Field,
    readonly max: number,
  ) {
    rangeCheckWeights(max);
    this.measLen = bitLength(max);
    this.gadgets = [new PolyEval([0, -1, 1], this.measLen)];
    this.gadgetCalls = [this.measLen];
  }

  encode(measurement: number): FVec {
    return encodeRangeCheckedInt(checkInt(measurement, this.max), this.max).map(BigInt);
  }

  gadgetInputs(meas: FVec): FVec[][] {
    return [meas.map((x) => [x])];
  }
}

/** What SumVecRanges, Histogram and MultihotCountVec share: every encoded entry is a bit, checked
 * by ParallelSum(Mul, chunk) with one joint random value per chunk. */
abstract class ChunkedBitCheck<M> implements Circuit<M> {
  readonly gadgets: Gadget[];
  readonly gadgetCalls: number[];
  readonly jointRandLen: number;

  constructor(
    readonly field: Field,
    readonly measLen: number,
    readonly chunkLength: number,
  ) {
    if (!(Number.isSafeInteger(chunkLength) && chunkLength >= 1)) {
      throw new RangeError("chunk_length must be a positive integer");
    }
    const calls = Math.ceil(measLen / chunkLength);
    this.gadgets = [new ParallelSum(new Mul(), chunkLength)];
    this.gadgetCalls = [calls];
    this.jointRandLen = calls;
  }

  abstract encode(measurement: M): FVec;

  gadgetInputs(meas: FVec, jointRand: FVec, numShares: number): FVec[][] {
    return [
      bitCheckInputs(this.field, meas, jointRand, this.chunkLength, this.gadgetCalls[0]!, numShares),
    ];
  }
}

/** A vector of integers, entry i in [0, maxima[i]]: each entry as its range-checked bits,
 * zero-padded to the longest entry's bit length (SumVecRanges; SumVec for equal maxima). */
export class SumVecRanges extends ChunkedBitCheck<readonly number[]> {
  readonly maxima: readonly number[];
  /** b: the encoded elements of every entry */
  readonly bits: number;

  constructor(field: Field, maxima: readonly number[], chunkLength: number) {
    if (maxima.length < 1) throw new RangeError("length must be positive");
    maxima.forEach(rangeCheckWeights);
    const bits = Math.max(...maxima.map(bitLength));
    super(field, maxima.length * bits, chunkLength);
    this.maxima = maxima.slice();
    this.bits = bits;
  }

  get length(): number {
    return this.maxima.length;
  }

  encode(measurement: readonly number[]): FVec {
    if (measurement.length !== this.maxima.length) {
      throw new RangeError(`measurement has ${measurement.length} entries, not ${this.maxima.length}`);
    }
    const out: FVec = [];
    measurement.forEach((x, i) => {
      const max = this.maxima[i]!;
      for (const b of encodeRangeCheckedInt(checkInt(x, max), max)) out.push(BigInt(b));
      for (let k = bitLength(max); k < this.bits; k++) out.push(0n);
    });
    return out;
  }
}

/** SumVec (§7.4.3): `length` integers, each in [0, max]. */
export class SumVec extends SumVecRanges {
  constructor(field: Field, length: number, max: number, chunkLength: number) {
    super(field, new Array<number>(length).fill(max), chunkLength);
  }
}

/** Histogram (§7.4.4): a one-hot vector of `length` buckets. */
export class Histogram extends ChunkedBitCheck<number> {
  constructor(
    field: Field,
    readonly length: number,
    chunkLength: number,
  ) {
    super(field, length, chunkLength);
  }

  encode(measurement: number): FVec {
    const out = this.field.zeros(this.length);
    out[checkInt(measurement, this.length - 1)] = 1n;
    return out;
  }
}

/** MultihotCountVec (§7.4.5): a 0/1 vector with at most `maxWeight` ones, followed by its
 * weight as a range-checked integer. */
export class MultihotCountVec extends ChunkedBitCheck<readonly boolean[]> {
  constructor(
    field: Field,
    readonly length: number,
    readonly maxWeight: number,
    chunkLength: number,
  ) {
    if (!(maxWeight > 0 && maxWeight <= length)) throw new RangeError("need 0 < max_weight <= length");
    super(field, length + bitLength(maxWeight), chunkLength);
  }

  encode(measurement: readonly boolean[]): FVec {
    if (measurement.length !== this.length) throw new RangeError("measurement of the wrong length");
    const weight = measurement.filter((x) => x).length;
    if (weight > this.maxWeight) throw new RangeError(`weight ${weight} exceeds ${this.maxWeight}`);
    return [
      ...measurement.map((x) => (x ? 1n : 0n)),
      ...encodeRangeCheckedInt(weight, this.maxWeight).map(BigInt),
    ];
  }
}
