/**
 * Prime fields of the VDAF specification (draft-irtf-cfrg-vdaf-18…20, §6.1), ported from
 * shared/crypto/prio3/field.py. An element is a BigInt in [0, p); a vector is a bigint[].
 * Only what a client needs: arithmetic, the little-endian encoding (§6.1.1), and the NTT and
 * Lagrange-basis helpers (§6.1.2–6.1.3) the FLP prover uses.
 *
 *   Field64:  p = 2^32 · 4294967295 + 1,          8 bytes, generator 7^4294967295, order 2^32
 *   Field128: p = 2^66 · 4611686018427387897 + 1, 16 bytes, generator 7^4611686018427387897,
 *             order 2^66
 */

export type FVec = bigint[];

export function powMod(base: bigint, exp: bigint, mod: bigint): bigint {
  let result = 1n;
  let b = base % mod;
  let e = exp;
  while (e > 0n) {
    if (e & 1n) result = (result * b) % mod;
    b = (b * b) % mod;
    e >>= 1n;
  }
  return result;
}

/** The smallest power of two ≥ x (x ≥ 1). */
export function nextPowerOf2(x: number): number {
  if (x < 1) throw new RangeError("nextPowerOf2 needs x >= 1");
  let n = 1;
  while (n < x) n *= 2;
  return n;
}

function log2Exact(n: number): number {
  if (n < 1 || (n & (n - 1)) !== 0) throw new RangeError(`${n} is not a positive power of two`);
  return Math.round(Math.log2(n));
}

const bitReversals = new Map<number, number[]>();

/** The bit-reversal permutation of range(n), n = 2^logN (cached per n). */
function bitReverse(n: number, logN: number): number[] {
  let perm = bitReversals.get(n);
  if (perm === undefined) {
    perm = [];
    for (let i = 0; i < n; i++) {
      let r = 0;
      for (let b = 0; b < logN; b++) r |= ((i >> b) & 1) << (logN - 1 - b);
      perm.push(r);
    }
    bitReversals.set(n, perm);
  }
  return perm;
}

export class Field {
  readonly p: bigint;
  /** next_power_of_2(p) − 1: the mask of rejection sampling (§6.2 next_vec). */
  readonly mask: bigint;
  private readonly rootCache = new Map<number, FVec>();
  private readonly smallInverses = new Map<number, bigint>();

  constructor(
    readonly name: string,
    modulus: bigint,
    readonly encodedSize: number,
    readonly genOrder: bigint,
    readonly generator: bigint,
  ) {
    this.p = modulus;
    this.mask = (1n << BigInt(modulus.toString(2).length)) - 1n;
  }

  /** Reduce any BigInt (negative ones are negations) into [0, p). */
  of(x: bigint | number): bigint {
    const v = BigInt(x) % this.p;
    return v < 0n ? v + this.p : v;
  }

  add(a: bigint, b: bigint): bigint {
    const s = a + b;
    return s >= this.p ? s - this.p : s;
  }

  sub(a: bigint, b: bigint): bigint {
    const s = a - b;
    return s < 0n ? s + this.p : s;
  }

  mul(a: bigint, b: bigint): bigint {
    return (a * b) % this.p;
  }

  inv(a: bigint): bigint {
    if (a === 0n) throw new RangeError("0 has no inverse");
    return powMod(a, this.p - 2n, this.p);
  }

  /** n⁻¹ for a small integer n (an NTT size, a share count), computed once per n: the prover
   * asks for the same few thousands of times per report. */
  invSmall(n: number): bigint {
    let v = this.smallInverses.get(n);
    if (v === undefined) {
      v = this.inv(BigInt(n));
      this.smallInverses.set(n, v);
    }
    return v;
  }

  zeros(n: number): FVec {
    return new Array<bigint>(n).fill(0n);
  }

  /** Each element as encodedSize little-endian bytes, concatenated (§6.1.1 encode_vec). */
  encodeVec(vec: FVec): Uint8Array {
    const size = this.encodedSize;
    const out = new Uint8Array(vec.length * size);
    const view = new DataView(out.buffer);
    vec.forEach((x, i) => {
      let v = x;
      for (let k = 0; k < size; k += 8) {
        view.setBigUint64(i * size + k, v & 0xffffffffffffffffn, true);
        v >>= 64n;
      }
    });
    return out;
  }

  /** The little-endian encodedSize-byte integers of `bytes` (not reduced, not checked). */
  intsFromLE(bytes: Uint8Array): bigint[] {
    const size = this.encodedSize;
    if (bytes.length % size) throw new RangeError("length is not a multiple of the element size");
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const out: bigint[] = [];
    for (let i = 0; i < bytes.length; i += size) {
      let v = 0n;
      for (let k = size - 8; k >= 0; k -= 8) v = (v << 64n) | view.getBigUint64(i + k, true);
      out.push(v);
    }
    return out;
  }

  /** Inverse of encodeVec; RangeError on a length error or an element ≥ p. */
  decodeVec(bytes: Uint8Array): FVec {
    const out = this.intsFromLE(bytes);
    if (out.some((x) => x >= this.p)) throw new RangeError("modulus overflow");
    return out;
  }

  // -- NTT-friendly interface (§6.1.2) ---------------------------------------------------------

  /** [W_n^0, …, W_n^(n−1)], W_n = gen^(GEN_ORDER / n) (cached per n). */
  rootPowers(n: number): FVec {
    let out = this.rootCache.get(n);
    if (out === undefined) {
      log2Exact(n);
      if (BigInt(n) > this.genOrder) throw new RangeError("n exceeds the generator's order");
      const w = powMod(this.generator, this.genOrder / BigInt(n), this.p);
      out = [];
      let acc = 1n;
      for (let i = 0; i < n; i++) {
        out.push(acc);
        acc = (acc * w) % this.p;
      }
      this.rootCache.set(n, out);
    }
    return out;
  }

  /** Evaluations v[i] = q(W_n^i) of the polynomial with coefficients `coeffs` (length ≤ n,
   * zero-padded); with `setS`, v[i] = q(s · W_n^i), s = W_{2n} (iterative Cooley–Tukey). */
  ntt(coeffs: FVec, n: number, setS = false): FVec {
    const logN = log2Exact(n);
    const p = this.p;
    if (coeffs.length > n) throw new RangeError("more coefficients than evaluation points");
    let a: FVec = coeffs.slice();
    while (a.length < n) a.push(0n);
    if (setS) {
      const s = this.rootPowers(2 * n);
      a = a.map((c, i) => (c * s[i]!) % p);
    }
    const perm = bitReverse(n, logN);
    a = perm.map((i) => a[i]!);
    for (let stage = 1; stage <= logN; stage++) {
      const m = 1 << stage;
      const half = m >> 1;
      const tw = this.rootPowers(m);
      for (let start = 0; start < n; start += m) {
        for (let j = 0; j < half; j++) {
          const u = a[start + j]!;
          const v = (a[start + j + half]! * tw[j]!) % p;
          const s = u + v;
          a[start + j] = s >= p ? s - p : s;
          const d = u - v;
          a[start + j + half] = d < 0n ? d + p : d;
        }
      }
    }
    return a;
  }

  /** Coefficients of the polynomial of degree < n whose evaluations at W_n^i are `values`. */
  invNtt(values: FVec, n: number): FVec {
    if (values.length !== n) throw new RangeError("invNtt needs exactly n values");
    const forward = this.ntt(values, n);
    const nInv = this.invSmall(n);
    const out: FVec = [];
    for (let k = 0; k < n; k++) out.push((forward[(n - k) % n]! * nInv) % this.p);
    return out;
  }

  /** 2n evaluations (at W_{2n}^k) of the polynomial of degree < n given by its n evaluations at
   * W_n^i: the even points are the inputs, the odd ones come from ntt(inv_ntt(v), n, setS). */
  doubleEvaluations(values: FVec): FVec {
    const n = values.length;
    const odd = this.ntt(this.invNtt(values, n), n, true);
    const out: FVec = new Array<bigint>(2 * n);
    for (let i = 0; i < n; i++) {
      out[2 * i] = values[i]!;
      out[2 * i + 1] = odd[i]!;
    }
    return out;
  }
}

export const Field64 = new Field(
  "Field64",
  2n ** 32n * 4294967295n + 1n,
  8,
  2n ** 32n,
  powMod(7n, 4294967295n, 2n ** 32n * 4294967295n + 1n),
);

export const Field128 = new Field(
  "Field128",
  2n ** 66n * 4611686018427387897n + 1n,
  16,
  2n ** 66n,
  powMod(7n, 4611686018427387897n, 2n ** 66n * 4611686018427387897n + 1n),
);
