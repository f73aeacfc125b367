/**
 * The Gaussian mechanism of `ldp-linucb` (Zheng et al., NeurIPS 2020, Alg. 5; docs/protocol.md
 * §3.3; shared/core/randomizers/gaussian.py). A report is the weighted clean vector
 * v = (diag(x xᵀ), b · offdiag_{i<j}(x xᵀ), w · a x) plus N(0, σ²) per entry, as little-endian
 * float64, with σ the analytic Gaussian calibration at the encoding's exact L2 sensitivity Δ:
 *
 * - "plain" (b = 1, w = 1, a = r): Δ² = 2L⁴ + 2L² + ½ if L² ≥ ½, else Δ = 2L;
 * - "frobenius" (b = √2, any w, a = r): with A = L⁴, U = w²L², Δ² = 2A + 2U + U²/(2A) if U ≤ 2A,
 *   else 4U;
 * - "centered" (b = √2, weight w, a = r − ½, x₀ = c): Δ² = 2L⁴ − 2t² + (w²/2)(L² + t), t = w²/8
 *   clamped to [max(0, 2c² − L²), L²];
 * - "centered-upper" (b = 1, a = r − ½, x₀ = c): the larger of L⁴ − t² + R⁴ − (t − c²)² +
 *   (w²/2)(L² + |t|) at t₊ = (c² + w²/4)/2 clamped to [max(0, 2c² − L²), L²] and, if 2c² < L²,
 *   at t₋ = (c² − w²/4)/2 clamped to [2c² − L², 0] (R² = L² − c²).
 *
 * Under the centered encodings x is projected onto {x₀ = c, ‖x‖ ≤ L} as a last guard. The
 * noise is a floating-point Gaussian from CSPRNG uniforms (random.normalPair), as the Python
 * device's numpy draw is a floating-point one: docs/web-client.md states the limits.
 */
import { BitStream, normalPair } from "../crypto/random.js";
import { gaussianSigma } from "./analytic-gaussian.js";
import { checkInput, checkIntercept, ontoIntercept, upperIndices } from "./common.js";

export type GaussianEncoding = "plain" | "frobenius" | "centered" | "centered-upper";
const ENCODINGS: GaussianEncoding[] = ["plain", "frobenius", "centered", "centered-upper"];
const H = 0.5; // |r − ½| ≤ ½

function centeredPairBound(L: number, w: number, c: number): number {
  const h2 = H * H;
  const sLow = Math.max(2 * c * c - L * L, 0);
  const s = Math.min(Math.max((w * w * h2) / 2, sLow), L * L);
  return 2 * L ** 4 - 2 * s * s + 2 * w * w * h2 * (L * L + s);
}

function centeredUpperBound(L: number, w: number, c: number): number {
  const R2 = L * L - c * c;
  const k = (w * H) ** 2;
  const low = 2 * c * c - L * L;
  const f = (t: number) => L ** 4 - t * t + R2 * R2 - (t - c * c) ** 2 + 2 * k * (L * L + Math.abs(t));
  const candidates = [Math.min(Math.max((c * c + k) / 2, Math.max(low, 0)), L * L)];
  if (low < 0) candidates.push(Math.min(Math.max((c * c - k) / 2, low), 0));
  return Math.max(...candidates.map(f));
}

/** Δ of the report's clean vector under `encoding` (gaussian.encoding_sensitivity). */
export function encodingSensitivity(L: number, encoding: GaussianEncoding, w = 1, c?: number): number {
  if (!ENCODINGS.includes(encoding)) throw new RangeError(`encoding must be one of ${ENCODINGS.join(", ")}`);
  if (!(w > 0 && Number.isFinite(w))) throw new RangeError("u_weight must be positive and finite");
  checkIntercept(encoding.startsWith("centered"), c, L);
  if (encoding === "plain") {
    if (w !== 1) throw new RangeError("the plain encoding has u_weight 1");
    const L2 = L * L;
    return L2 >= 0.5 ? Math.sqrt(2 * L2 * L2 + 2 * L2 + 0.5) : 2 * L;
  }
  if (encoding === "frobenius") {
    const A = L ** 4;
    const U = (w * L) ** 2;
    return U <= 2 * A ? Math.sqrt(2 * A + 2 * U + (U * U) / (2 * A)) : 2 * Math.sqrt(U);
  }
  if (encoding === "centered") return Math.sqrt(centeredPairBound(L, w, c!));
  return Math.sqrt(centeredUpperBound(L, w, c!));
}

export interface GaussianParams {
  d: number;
  epsilon: number;
  delta: number;
  L?: number;
  encoding?: GaussianEncoding;
  u_weight?: number;
  intercept?: number;
}

export class GaussianRandomizer {
  readonly d: number;
  readonly L: number;
  readonly encoding: GaussianEncoding;
  readonly uWeight: number;
  readonly intercept: number | undefined;
  readonly sensitivity: number;
  readonly sigma: number;
  /** per released entry: 1 on the diagonal, b off it, w on the reward part */
  readonly weights: number[];

  constructor(p: GaussianParams) {
    this.d = p.d;
    this.L = p.L ?? 1;
    this.encoding = p.encoding ?? "plain";
    this.uWeight = p.u_weight ?? 1;
    this.intercept = p.intercept ?? undefined;
    if (!(Number.isInteger(this.d) && this.d >= 1 && this.L > 0)) throw new RangeError("need d >= 1, L > 0");
    this.sensitivity = encodingSensitivity(this.L, this.encoding, this.uWeight, this.intercept);
    this.sigma = gaussianSigma(p.epsilon, p.delta, this.sensitivity);
    const b = this.encoding === "frobenius" || this.encoding === "centered" ? Math.SQRT2 : 1;
    const [ii, jj] = upperIndices(this.d);
    this.weights = [...ii.map((i, k) => (i === jj[k] ? 1 : b)), ...new Array<number>(this.d).fill(this.uWeight)];
  }

  get width(): number {
    return (this.d * (this.d + 3)) / 2;
  }

  /** The noise-free row: weights ⊙ (upper(x xᵀ), a x). */
  clean(x: readonly number[], r: number): number[] {
    let xs = x.slice();
    let a = r;
    if (this.intercept !== undefined) {
      xs = ontoIntercept(xs, this.intercept, this.L);
      a = r - 0.5;
    }
    const [ii, jj] = upperIndices(this.d);
    const v = [...ii.map((i, k) => xs[i]! * xs[jj[k]!]!), ...xs.map((xi) => a * xi)];
    return this.encoding === "plain" ? v : v.map((e, k) => e * this.weights[k]!);
  }

  /** One report row (checked input; refused like the Python device's). */
  randomize(x: readonly number[], r: number, bits: BitStream = new BitStream()): number[] {
    checkInput(x, r, this.d, this.L, this.intercept);
    const clean = this.clean(x, r);
    const out: number[] = [];
    for (let k = 0; k < clean.length; k += 2) {
      const [n0, n1] = normalPair(bits);
      out.push(clean[k]! + this.sigma * n0);
      if (k + 1 < clean.length) out.push(clean[k + 1]! + this.sigma * n1);
    }
    return out;
  }
}
