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

/** A stream of random bits over a RandomSource, refilled 64 bytes at a time. */
export class BitStream {
  private buf: Uint8Array = new Uint8Array(0);
  private pos = 0; // bit position in buf

  constructor(private readonly source: RandomSource = cryptoRandom) {}

  bit(): number {
    if (this.pos >= this.buf.length * 8) {
      this.buf = this.source(64);
      this.pos = 0;
    }
    const b = (this.buf[this.pos >> 3]! >> (7 - (this.pos & 7))) & 1;
    this.pos++;
    return b;
  }

  /** A uniform integer in [0, 2^k). */
  bits(k: number): bigint {
    let v = 0n;
    for (let i = 0; i < k; i++) v = (v << 1n) | BigInt(this.bit());
    return v;
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

/** 1 with probability exactly p (a float in [0, 1]), else 0 (module doc). */
export function exactBernoulli(p: number, bits: BitStream): number {
  if (!(p >= 0 && p <= 1)) throw new RangeError(`not a probability: ${p}`);
  const { num, k } = dyadic(p);
  if (k === 0) return num >= 1n ? 1 : 0; // p = 0 or 1
  // compare U (k bits, MSB first) with num bit by bit
  for (let i = k - 1; i >= 0; i--) {
    const u = bits.bit();
    const n = Number((num >> BigInt(i)) & 1n);
    if (u !== n) return u < n ? 1 : 0;
  }
  return 0; // U = num: not below
}

/** A uniform double in (0, 1): 53 random bits, never 0 (the logarithm below needs u > 0). */
export function uniformOpen(bits: BitStream): number {
  for (;;) {
    const u = Number(bits.bits(53)) / 2 ** 53;
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
