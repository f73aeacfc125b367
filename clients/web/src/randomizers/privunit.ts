/**
 * PrivUnit2 (Bhowmick et al. 2018) on `ldp-linucb`'s report vector: the pure ε-LDP report of a
 * task with `mechanism = "privunit"` (shared/core/randomizers/privunit.py, whose module doc
 * derives it). The free part v_f of the Gaussian report's weighted clean vector (every entry but
 * x₀² = c² under an intercept) lies in the ball of radius r; the device rounds it to a unit
 * û = ±v_f/‖v_f‖ (+ with probability (1 + ‖v_f‖/r)/2), draws z uniform on the cap ⟨z, û⟩ ≥ γ
 * with probability p, else uniform on its complement, and releases r z / m (the constant entry
 * exact). ε = ln(p(1 − q)/((1 − p)q)) exactly, q the cap's fraction of the sphere; γ maximises
 * m = E⟨z, û⟩ at that ε, so the Python and browser devices find the same (γ, p, m).
 *
 * The cap draw here is by rejection (a uniform direction from Gaussian coordinates, kept when it
 * falls in the chosen region), the Python device's by the inverse CDF of ⟨z, û⟩: the same
 * distribution (uniform on the region). Floating point, as the Gaussian report.
 */
import { BitStream, exactBernoulli, normalPair } from "../crypto/random.js";
import { checkInput } from "./common.js";
import { GaussianRandomizer, type GaussianParams } from "./gaussian.js";

// Lanczos (g = 7, n = 9): ln Γ(x) for x > 0 to about 1e-15 relative.
const LANCZOS = [0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
  -176.61502916214059, 12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6,
  1.5056327351493116e-7];

export function lnGamma(x: number): number {
  if (x < 0.5) return Math.log(Math.PI / Math.abs(Math.sin(Math.PI * x))) - lnGamma(1 - x);
  const y = x - 1;
  let a = LANCZOS[0]!;
  const t = y + 7.5;
  for (let i = 1; i < 9; i++) a += LANCZOS[i]! / (y + i);
  return 0.5 * Math.log(2 * Math.PI) + (y + 0.5) * Math.log(t) - t + Math.log(a);
}

/** Continued fraction of the incomplete beta (Lentz; Numerical Recipes' betacf). */
function betaCf(a: number, b: number, x: number): number {
  const TINY = 1e-300;
  let c = 1;
  let d = 1 - ((a + b) * x) / (a + 1);
  if (Math.abs(d) < TINY) d = TINY;
  d = 1 / d;
  let h = d;
  for (let m = 1; m <= 10000; m++) {
    const m2 = 2 * m;
    let aa = (m * (b - m) * x) / ((a + m2 - 1) * (a + m2));
    d = 1 + aa * d;
    if (Math.abs(d) < TINY) d = TINY;
    c = 1 + aa / c;
    if (Math.abs(c) < TINY) c = TINY;
    d = 1 / d;
    h *= d * c;
    aa = (-(a + m) * (a + b + m) * x) / ((a + m2) * (a + m2 + 1));
    d = 1 + aa * d;
    if (Math.abs(d) < TINY) d = TINY;
    c = 1 + aa / c;
    if (Math.abs(c) < TINY) c = TINY;
    d = 1 / d;
    const del = d * c;
    h *= del;
    if (Math.abs(del - 1) < 1e-16) break;
  }
  return h;
}

/** The regularized incomplete beta I_x(a, b). */
export function betaInc(a: number, b: number, x: number): number {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const front = Math.exp(lnGamma(a + b) - lnGamma(a) - lnGamma(b) + a * Math.log(x) + b * Math.log(1 - x));
  return x < (a + 1) / (a + b + 2) ? (front * betaCf(a, b, x)) / a : 1 - (front * betaCf(b, a, 1 - x)) / b;
}

/** q = P(⟨U, e⟩ ≥ γ), U uniform on S^{D−1}, γ ∈ [0, 1] (privunit.cap_fraction). */
export function capFraction(D: number, gamma: number): number {
  return 0.5 * betaInc((D - 1) / 2, 0.5, 1 - gamma * gamma);
}

/** μ₊ = E[t 1{t ≥ γ}] (privunit.cap_first_moment). */
export function capFirstMoment(D: number, gamma: number): number {
  const lnB = lnGamma(0.5) + lnGamma((D - 1) / 2) - lnGamma(D / 2);
  return (1 - gamma * gamma) ** ((D - 1) / 2) / ((D - 1) * Math.exp(lnB));
}

/** (γ, p, m) at pure ε on S^{D−1}: γ maximises m with p from ε (privunit.privunit_parameters). */
export function privunitParameters(D: number, epsilon: number): { gamma: number; p: number; m: number } {
  if (!(Number.isInteger(D) && D >= 2)) throw new RangeError("PrivUnit needs D >= 2");
  if (!(epsilon > 0 && Number.isFinite(epsilon))) throw new RangeError("ε must be positive and finite");
  const spent = (g: number) => {
    const q = capFraction(D, g);
    return Math.log((1 - q) / q);
  };
  let hi = 1 - 1e-12;
  if (spent(hi) > epsilon) {
    let lo = 0;
    for (let i = 0; i < 200; i++) {
      const mid = (lo + hi) / 2;
      if (spent(mid) > epsilon) hi = mid; else lo = mid;
    }
    hi = lo;
  }
  const params = (g: number) => {
    const q = capFraction(D, g);
    const p = 1 / (1 + Math.exp(-(epsilon - Math.log((1 - q) / q))));
    return { gamma: g, p, m: capFirstMoment(D, g) * (p / q - (1 - p) / (1 - q)) };
  };
  // Golden-section search for the maximum of m (unimodal in γ).
  const phi = (Math.sqrt(5) - 1) / 2;
  let a = 0;
  let b = hi;
  let x1 = b - phi * (b - a);
  let x2 = a + phi * (b - a);
  let f1 = params(x1).m;
  let f2 = params(x2).m;
  while (b - a > 1e-12) {
    if (f1 < f2) {
      a = x1; x1 = x2; f1 = f2; x2 = a + phi * (b - a); f2 = params(x2).m;
    } else {
      b = x2; x2 = x1; f2 = f1; x1 = b - phi * (b - a); f1 = params(x1).m;
    }
  }
  return params((a + b) / 2);
}

/** PrivUnit2 on the report vector of `encoding` (privunit.PrivUnitRandomizer). */
export class PrivUnitRandomizer {
  readonly base: GaussianRandomizer;
  readonly free: boolean[];
  readonly D: number;
  readonly radius: number;
  readonly gamma: number;
  readonly p: number;
  readonly m: number;

  constructor(p: Omit<GaussianParams, "delta">) {
    // The Gaussian report's encoding, weights and checks; its σ (at a placeholder δ) is unused.
    this.base = new GaussianRandomizer({ ...p, delta: 0.5 });
    const b = this.base;
    this.free = new Array<boolean>(b.width).fill(true);
    if (b.intercept !== undefined) this.free[0] = false;
    this.D = this.free.filter((f) => f).length;
    const L2 = b.L * b.L;
    const gram = L2 * L2 - (b.intercept === undefined ? 0 : b.intercept ** 4);
    const a = b.encoding.startsWith("centered") ? 0.5 : 1;
    this.radius = Math.sqrt(gram + (b.uWeight * a) ** 2 * L2);
    ({ gamma: this.gamma, p: this.p, m: this.m } = privunitParameters(this.D, p.epsilon));
  }

  get width(): number {
    return this.base.width;
  }

  /** ‖free part‖ of every report: r/m. */
  get norm(): number {
    return this.radius / this.m;
  }

  /** One report row (checked input, refused like the Python device's). */
  randomize(x: readonly number[], r: number, bits: BitStream = new BitStream()): number[] {
    const b = this.base;
    checkInput(x, r, b.d, b.L, b.intercept);
    const clean = b.clean(x, r); // weighted (the plain encoding's weights are all 1)
    const vf = clean.filter((_, k) => this.free[k]);
    const n = Math.sqrt(vf.reduce((s, v) => s + v * v, 0));
    const ratio = Math.min(Math.max(n / this.radius, 0), 1);
    const sign = exactBernoulli((1 + ratio) / 2, bits) === 1 ? 1 : -1;
    const u = n > 0 ? vf.map((v) => (sign * v) / n) : vf.map((_, k) => (k === 0 ? sign : 0));
    const wantCap = exactBernoulli(this.p, bits) === 1;
    let z: number[];
    for (;;) {
      const g: number[] = [];
      while (g.length < this.D) g.push(...normalPair(bits));
      g.length = this.D;
      const gn = Math.sqrt(g.reduce((s, v) => s + v * v, 0));
      if (!(gn > 0)) continue;
      z = g.map((v) => v / gn);
      const t = z.reduce((s, v, k) => s + v * u[k]!, 0);
      if ((t >= this.gamma) === wantCap) break;
    }
    const out = clean.slice();
    let j = 0;
    for (let k = 0; k < out.length; k++) if (this.free[k]) out[k] = (this.radius / this.m) * z[j++]!;
    return out;
  }
}
