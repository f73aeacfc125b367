/**
 * The device side of `ddp-linucb` (docs/protocol.md §3.5; shared/core/randomizers/skellam.py;
 * the design of issue 40, ddp-design.md): clip, scale, round — and no noise share: the
 * aggregators add the Skellam noise to their aggregate shares, so the device sends its exact
 * rounded statistics, each within its honest range, which the Prio3 proof checks.
 *
 * With v = (upper(x xᵀ), a x) (a = r, or r − ½ under "centered" with x₀ = c) and the weights
 * of the encoding (1 on the diagonal; b = 1 ("upper") or √2 ("frobenius", "centered") off it;
 * w on the reward part):
 * 1. x clipped to ‖x‖ ≤ L (or projected onto {x₀ = c, ‖x‖ ≤ L}), r to [0, 1]; v_w = weights ⊙ v
 *    clipped to ‖v_w‖ ≤ C = √(L⁴ + w²h²L²), h = 1 (½ under "centered"): valid inputs unchanged;
 * 2. y = s · v_w; each y_i becomes ⌊y_i⌋ + Bernoulli(y_i − ⌊y_i⌋), exactly, from the CSPRNG
 *    (unbiased: E z = y; ‖z‖ ≤ B = sC + √n always, Kairouz–Liu–Steinke 2021 §4).
 */
import { BitStream, exactBernoulli } from "../crypto/random.js";
import { checkInput, checkIntercept, norm, ontoIntercept, upperIndices } from "./common.js";

export type DdpEncoding = "upper" | "frobenius" | "centered";
const ENCODINGS: DdpEncoding[] = ["upper", "frobenius", "centered"];
// Relative slack on the norm bound for floating-point error in s·v (skellam.FLOAT_SLACK).
const FLOAT_SLACK = 1e-9;

export interface DdpParams {
  d: number;
  scale?: number;
  L?: number;
  encoding?: DdpEncoding;
  u_weight?: number;
  intercept?: number;
}

export class DdpRandomizer {
  readonly d: number;
  readonly n: number;
  readonly scale: number;
  readonly L: number;
  readonly encoding: DdpEncoding;
  readonly uWeight: number;
  readonly intercept: number | undefined;
  readonly weights: number[];
  /** C ≥ ‖v_w‖ */
  readonly clip: number;
  /** B = sC(1 + 1e-9) + √n ≥ ‖z‖ */
  readonly normBound: number;

  constructor(p: DdpParams) {
    this.d = p.d;
    this.n = (p.d * (p.d + 3)) / 2;
    this.scale = p.scale ?? 128;
    this.L = p.L ?? 1;
    this.encoding = p.encoding ?? "upper";
    this.uWeight = p.u_weight ?? 1;
    this.intercept = p.intercept ?? undefined;
    if (!(Number.isInteger(this.d) && this.d >= 1 && this.L > 0 && this.scale >= 1 && Number.isFinite(this.scale))) {
      throw new RangeError("need d >= 1, L > 0, scale >= 1");
    }
    if (!ENCODINGS.includes(this.encoding)) throw new RangeError(`encoding must be one of ${ENCODINGS.join(", ")}`);
    if (!(this.uWeight > 0 && Number.isFinite(this.uWeight))) throw new RangeError("u_weight must be positive and finite");
    checkIntercept(this.encoding === "centered", this.intercept, this.L);
    const b = this.encoding === "upper" ? 1 : Math.SQRT2;
    const [ii, jj] = upperIndices(this.d);
    this.weights = [...ii.map((i, k) => (i === jj[k] ? 1 : b)), ...new Array<number>(this.d).fill(this.uWeight)];
    const h = this.encoding === "centered" ? 0.5 : 1;
    this.clip = Math.sqrt(this.L ** 4 + (this.uWeight * h * this.L) ** 2);
    this.normBound = this.scale * this.clip * (1 + FLOAT_SLACK) + Math.sqrt(this.n);
  }

  /** The weighted clean statistics v_w (skellam.clean_statistics). */
  statistics(x: readonly number[], r: number): number[] {
    let xs: number[];
    let a = Math.min(1, Math.max(0, r));
    if (this.intercept === undefined) {
      const f = Math.min(1, this.L / Math.max(norm(x), 1e-300));
      xs = x.map((v) => v * f);
    } else {
      xs = ontoIntercept(x, this.intercept, this.L);
      a -= 0.5;
    }
    const [ii, jj] = upperIndices(this.d);
    const v = [...ii.map((i, k) => xs[i]! * xs[jj[k]!]!), ...xs.map((xi) => a * xi)].map(
      (e, k) => e * this.weights[k]!,
    );
    const f = Math.min(1, this.clip / Math.max(norm(v), 1e-300));
    return v.map((e) => e * f);
  }

  /** One user's rounded statistics z (the report's values), every coin exact. */
  rounded(x: readonly number[], r: number, bits: BitStream = new BitStream()): number[] {
    checkInput(x, r, this.d, this.L, this.intercept);
    const out = this.statistics(x, r).map((v) => {
      const y = this.scale * v;
      const low = Math.floor(y);
      return low + exactBernoulli(y - low, bits);
    });
    if (norm(out) > this.normBound) throw new Error("rounded statistics exceed the stated norm bound");
    return out;
  }
}
