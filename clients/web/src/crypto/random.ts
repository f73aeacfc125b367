/**
 * Every random choice of the library comes from here, and from `crypto.getRandomValues` only
 * (the Web Crypto CSPRNG, in browsers, workers and node ≥ 20); a test fails on any other source.
 *
 * Exact Bernoulli: a float p ∈ [0, 1] is a dyadic rational num / 2^k, and 1 is returned iff
 * U < num for U uniform on [0, 2^k) — probability exactly p, as the Python device's
 * `skellam.exact_bernoulli` (p.as_integer_ratio(), secrets.randbelow). The bits of U are drawn
 * lazily from the most significant one and compared with num's; the comparison is decided at
 * the first differing bit, so a draw costs 2 bits on average, never a float.
 */

/** A source of uniform random bytes; tests pass a deterministic one, the library defaults to
 * the Web Crypto CSPRNG. */
export type RandomSource = (n: number) => Uint8Array;

const MAX_CHUNK = 65536; // getRandomValues refuses more per call

export const cryptoRandom: RandomSource = (n: number): Uint8Array => {
  const out = new Uint8Array(n);
  for (let off = 0; off < n; off += MAX_CHUNK) {
    globalThis.crypto.getRandomValues(out.subarray(off, Math.min(n, off + MAX_CHUNK)));
  }
  return out;
};

/** A stream of random bits and bytes over a RandomSource, refilled 256 bytes at a time. */
export class BitStream {
  private buf: Uint8Array = new Uint8Array(0);
  private byte = 0; // next unread byte of buf
  private acc = 0; // the bits of the current byte not read yet, MSB first
  private left = 0; // how many

  constructor(private readonly source: RandomSource = cryptoRandom) {}

  private nextByte(): number {
    if (this.byte >= this.buf.length) {
      this.buf = this.source(256);
      this.byte = 0;
    }
    return this.buf[this.byte++]!;
  }

  bit(): number {
    if (this.left === 0) {
      this.acc = this.nextByte();
      this.left = 8;
    }
    this.left--;
    return (this.acc >> this.left) & 1;
  }

  /** A uniform integer in [0, 2^k), k ≤ 53, as a Number: whole bytes, then single bits. */
  uint(k: number): number {
    if (!(k >= 0 && k <= 53)) throw new RangeError("uint draws at most 53 bits");
    let v = 0;
    let n = k;
    for (; n >= 8; n -= 8) v = v * 256 + this.nextByte();
    for (; n > 0; n--) v = v * 2 + this.bit();
    return v;
  }

  /** A uniform integer in [0, 2^k). */
  bits(k: number): bigint {
    let v = 0n;
    let n = k;
    for (; n >= 48; n -= 48) v = (v << 48n) | BigInt(this.uint(48));
    return (v << BigInt(n)) | BigInt(this.uint(n));
  }
}

/** (num, k) with p = num / 2^k exactly, for a finite float p ≥ 0 (as float.as_integer_ratio). */
export function dyadic(p: number): { num: bigint; k: number } {
  if (!(Number.isFinite(p) && p >= 0)) throw new RangeError(`not a probability: ${p}`);
  if (p === 0) return { num: 0n, k: 0 };
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, p);
  const bits = view.getBigUint64(0);
  const exp = Number((bits >> 52n) & 0x7ffn);
  let mant = bits & ((1n << 52n) - 1n);
  let e: number;
  if (exp === 0) {
    e = -1074; // subnormal
  } else {
    mant |= 1n << 52n;
    e = exp - 1075;
  }
  // p = mant · 2^e; strip trailing zero bits so k is minimal
  while (mant > 0n && (mant & 1n) === 0n) {
    mant >>= 1n;
    e++;
  }
  return e >= 0 ? { num: mant << BigInt(e), k: 0 } : { num: mant, k: -e };
}

// The binary expansions of the last probabilities asked for (a randomizer asks for the same
// flip probability for every bit): num's k bits, most significant first.
const expansions = new Map<number, Uint8Array>();

function expansion(p: number): Uint8Array {
  let e = expansions.get(p);
  if (e === undefined) {
    const { num, k } = dyadic(p);
    e = new Uint8Array(k);
    for (let i = 0; i < k; i++) e[i] = Number((num >> BigInt(k - 1 - i)) & 1n);
    if (expansions.size >= 64) expansions.clear();
    expansions.set(p, e);
  }
  return e;
}

/** 1 with probability exactly p (a float in [0, 1]), else 0 (module doc). */
export function exactBernoulli(p: number, bits: BitStream): number {
  if (!(p >= 0 && p <= 1)) throw new RangeError(`not a probability: ${p}`);
  if (p === 0 || p === 1) return p;
  // compare U (k bits, MSB first) with num bit by bit: the first difference decides
  for (const n of expansion(p)) {
    const u = bits.bit();
    if (u !== n) return u < n ? 1 : 0;
  }
  return 0; // U = num: not below
}

/** A uniform double in (0, 1): 53 random bits, never 0 (the logarithm below needs u > 0). */
export function uniformOpen(bits: BitStream): number {
  for (;;) {
    const u = bits.uint(53) / 2 ** 53;
    if (u > 0) return u;
  }
}

/** Two independent N(0, 1) draws by the Box–Muller transform of two CSPRNG uniforms. A
 * floating-point Gaussian, like the Python device's numpy draw for ldp-linucb: not an exact
 * sampler (docs/web-client.md says what that means). */
export function normalPair(bits: BitStream): [number, number] {
  const u1 = uniformOpen(bits);
  const u2 = uniformOpen(bits);
  const r = Math.sqrt(-2 * Math.log(u1));
  return [r * Math.cos(2 * Math.PI * u2), r * Math.sin(2 * Math.PI * u2)];
}
