/**
 * The 0/1 randomizer of `sblb` (Garcelon et al., ALT 2022, Algorithms 2–3; docs/protocol.md
 * §3.4; shared/core/randomizers/binary.py), with every coin exact and from the CSPRNG.
 *
 * 1. Values in [0, 1], c = d(d+3)/2 of them: r x / (2L) + ½ (d values), then
 *    upper(x xᵀ) / (2L²) + ½, clipped to [0, 1].
 * 2. Each value v becomes m bits by stochastic unary rounding: u = v·m, f = ⌊u⌋, bits 1..f are
 *    1, bit f+1 (if f < m) is 1 with probability u − f, the rest 0 (E Σ bits = m v).
 * 3. Each bit is replaced, with probability p = 2 / (exp(2ε0 / (m d (d+3))) + 1), by a fair
 *    coin: one bit's likelihood ratio is (1 − p/2)/(p/2) = e^{2ε0/(m d(d+3))}, and the
 *    m·d(d+3)/2 bits of a report compose to exactly ε0-LDP (Garcelon Prop. 4).
 *
 * Python draws the coins from a numpy Generator with floating-point comparisons; here each is
 * an exact Bernoulli of the same float probability (random.ts), so the law is exactly the one
 * the accountant assumes for that p.
 */
import { BitStream, exactBernoulli } from "../crypto/random.js";
import { checkInput, upperIndices } from "./common.js";

export function nCoords(d: number): number {
  return (d * (d + 3)) / 2;
}

/** p = 2 / (exp(2ε0/(m d(d+3))) + 1), written 1 − tanh(a/2) (binary.flip_probability). */
export function flipProbability(eps0: number, d: number, m: number): number {
  if (!(eps0 > 0)) throw new RangeError("eps0 must be > 0");
  const a = (2.0 * eps0) / (m * d * (d + 3));
  return 1.0 - Math.tanh(a / 2.0);
}

/** The c values of step 1, in [0, 1]. */
export function encodeValues(x: readonly number[], r: number, L: number): number[] {
  const d = x.length;
  const [ii, jj] = upperIndices(d);
  const y = x.map((v) => (r * v) / (2 * L) + 0.5);
  const z = ii.map((i, k) => (x[i]! * x[jj[k]!]!) / (2 * L * L) + 0.5);
  return [...y, ...z].map((v) => Math.min(1, Math.max(0, v)));
}

export interface BinaryReport {
  /** the m·c randomized bits, value by value (the `reports` row before packing) */
  bits: number[];
  /** per value, the number of 1 bits among its m (0..m): the prio3 measurement */
  counts: number[];
}

export class BinaryRandomizer {
  readonly c: number;
  readonly p: number;

  constructor(
    readonly d: number,
    readonly eps0: number,
    readonly m = 1,
    readonly L = 1.0,
  ) {
    if (!(Number.isInteger(d) && d >= 1 && Number.isInteger(m) && m >= 1 && L > 0)) {
      throw new RangeError("need d >= 1, m >= 1, L > 0");
    }
    this.c = nCoords(d);
    this.p = flipProbability(eps0, d, m);
  }

  get width(): number {
    return this.c * this.m;
  }

  randomize(x: readonly number[], r: number, bits: BitStream = new BitStream()): BinaryReport {
    checkInput(x, r, this.d, this.L);
    const out: number[] = [];
    const counts: number[] = [];
    for (const v of encodeValues(x, r, this.L)) {
      const u = v * this.m;
      const f = Math.floor(u);
      const count = f + (f < this.m ? exactBernoulli(u - f, bits) : 0);
      let ones = 0;
      for (let k = 1; k <= this.m; k++) {
        let b = k <= count ? 1 : 0;
        if (exactBernoulli(this.p, bits)) b = bits.bit(); // replaced by a fair coin
        out.push(b);
        ones += b;
      }
      counts.push(ones);
    }
    return { bits: out, counts };
  }
}
