/**
 * The device side of `ddp-linucb` (docs/protocol.md §3.5; shared/core/randomizers/skellam.py;
 * the design of issue 40, ddp-design.md): clip, scale, round — and no noise share: the
 * aggregators add the Skellam noise to their aggregate shares, so the device sends its exact
 * rounded statistics, each within its honest range, which the Prio3 proof checks.
 *
 * With v = (upper(x xᵀ), a x) (a = r, or r − ½ under "centered" with ⟨e, x⟩ = c) and the
 * weights of the encoding (1 on the diagonal; b = 1 ("upper") or √2 ("frobenius", "centered")
 * off it; w on the reward part):
 * 1. x clipped to ‖x‖ ≤ L (or projected onto {⟨e, x⟩ = c, ‖x‖ ≤ L}), r to [0, 1]; v_w = weights ⊙ v
 *    clipped to ‖v_w‖ ≤ C = √(L⁴ + w²h²L²), h = 1 (½ under "centered"): valid inputs unchanged;
 * 2. y = s · v_w, clipped into the honest range [lo_i, hi_i] (a no-op but for float rounding at
 *    the edges); each y_i becomes ⌊y_i⌋ + Bernoulli(y_i − ⌊y_i⌋), exactly, from the CSPRNG
 *    (unbiased: E z = y; ‖z‖ ≤ B = sC + √n always, Kairouz–Liu–Steinke 2021 §4).
 *
 * The honest ranges (skellam.entry_ranges), in real units for ‖x‖ ≤ L and the reward factor's
 * bound h: the diagonal x_i² ∈ [0, L²]; off it b x_i x_j ∈ ±b L²/2; the reward part w a x_i ∈
 * ±w h L — with the intercept c (the rest of norm ≤ ρ = √(L² − c²)): x₀² = c², x_i² ≤ ρ²,
 * b x₀ x_j ∈ ±b c ρ, b x_i x_j ∈ ±b ρ²/2, w a x₀ ∈ ±w h c, w a x_i ∈ ±w h ρ. Scaled by s, a real
 * interval [a, b] becomes the integers [⌊s a⌋, ⌈s b⌉]. The Prio3 proof (SumVecRanges) enforces
 * them: a report moves each coordinate by at most what an honest one can.
 *
 * The intercept coordinates E (the task policy's intercept_coords; skellam.py *Encodings*):
 * e = Σ_{i∈E} e_i and every context has ⟨e, x⟩ = c. E = {0} (the default) is x₀ = c above; one
 * coordinate i₀ elsewhere is the same with i₀ in place of 0. With k = |E| ≥ 2 (per-arm, disjoint
 * features x = e_a ⊗ c_t whose every block starts with c: E = {0, p, 2p, …}) the check is
 * |⟨e, x⟩ − c| ≤ 1e-9·max(1, c) (base.off_intercept), the projection is onto
 * {⟨e, x⟩ = c, ‖x‖ ≤ L}, the ball of radius √(L² − c²/k) about (c/k) e in that hyperplane
 * (skellam.onto_intercept_direction), and the honest ranges are the plain ones above (no
 * intercept: x_i² ∈ [0, L²], b x_i x_j ∈ ±b L²/2) with the reward half range h = ½ — valid for
 * every ‖x‖ ≤ L. C (so B) is the same for every E; only the analyzer's pair bound and its
 * decoding (the released diagonal kept, Σ x = G̃ e / c) depend on k.
 */
import { BitStream, exactBernoulli } from "../crypto/random.js";
import { TaskVdaf } from "../crypto/reports.js";
import {
  checkInput, checkIntercept, checkInterceptCoords, FIRST_COORD, norm, ontoIntercept, upperIndices,
} from "./common.js";

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
  /** The intercept's coordinates E (the task policy's intercept_coords; default [0], x[0] = c):
   * increasing indices in [0, d), checked whenever given; the centered encoding uses them
   * (module doc). */
  intercept_coords?: readonly number[] | null;
}

export class DdpRandomizer {
  readonly d: number;
  readonly n: number;
  readonly scale: number;
  readonly L: number;
  readonly encoding: DdpEncoding;
  readonly uWeight: number;
  readonly intercept: number | undefined;
  /** E: ⟨e, x⟩ = c under "centered" ([0]: x[0] = c) */
  readonly interceptCoords: readonly number[];
  readonly weights: number[];
  /** C ≥ ‖v_w‖ */
  readonly clip: number;
  /** B = sC(1 + 1e-9) + √n ≥ ‖z‖ */
  readonly normBound: number;
  /** the honest range [rangeLo[i], rangeHi[i]] of each released integer */
  readonly rangeLo: number[];
  readonly rangeHi: number[];

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
    this.interceptCoords = p.intercept_coords === undefined || p.intercept_coords === null
      ? FIRST_COORD : checkInterceptCoords(p.intercept_coords, this.d);
    const b = this.encoding === "upper" ? 1 : Math.SQRT2;
    const [ii, jj] = upperIndices(this.d);
    this.weights = [...ii.map((i, k) => (i === jj[k] ? 1 : b)), ...new Array<number>(this.d).fill(this.uWeight)];
    const h = this.encoding === "centered" ? 0.5 : 1;
    this.clip = Math.sqrt(this.L ** 4 + (this.uWeight * h * this.L) ** 2);
    this.normBound = this.scale * this.clip * (1 + FLOAT_SLACK) + Math.sqrt(this.n);
    [this.rangeLo, this.rangeHi] = this.entryRanges();
  }

  /** (lo, hi) of every released integer (module doc; skellam.entry_ranges). */
  private entryRanges(): [number[], number[]] {
    const off = this.encoding === "upper" ? 1 : Math.SQRT2;
    const aMax = this.encoding === "centered" ? 0.5 : 1;
    // k ≥ 2 intercept coordinates: the plain ranges with h = ½ (module doc)
    const c = this.encoding === "centered" && this.interceptCoords.length === 1 ? this.intercept : undefined;
    const i0 = this.interceptCoords[0]!;
    const L = this.L;
    const rho = c !== undefined ? Math.sqrt(Math.max(L * L - c * c, 0)) : L;
    const loReal: number[] = [];
    const hiReal: number[] = [];
    const [ii, jj] = upperIndices(this.d);
    ii.forEach((i, k) => {
      const j = jj[k]!;
      if (i === j) {
        if (c !== undefined && i === i0) {
          loReal.push(c * c);
          hiReal.push(c * c);
        } else {
          loReal.push(0);
          hiReal.push(c !== undefined ? rho * rho : L * L);
        }
      } else {
        const bound = c !== undefined && (i === i0 || j === i0)
          ? off * c * rho
          : (off * (c !== undefined ? rho * rho : L * L)) / 2.0;
        loReal.push(-bound);
        hiReal.push(bound);
      }
    });
    for (let i = 0; i < this.d; i++) {
      const n = c !== undefined ? (i === i0 ? c : rho) : L;
      loReal.push(-this.uWeight * aMax * n);
      hiReal.push(this.uWeight * aMax * n);
    }
    return [loReal.map((v) => Math.floor(this.scale * v)), hiReal.map((v) => Math.ceil(this.scale * v))];
  }

  /** The task's Prio3 parameters: SumVecRanges over the honest ranges (prio3_task.task_vdaf). */
  taskVdaf(task: string): TaskVdaf {
    return TaskVdaf.ranges(task, this.rangeLo, this.rangeHi);
  }

  /** The weighted clean statistics v_w (skellam.clean_statistics). */
  statistics(x: readonly number[], r: number): number[] {
    let xs: number[];
    let a = Math.min(1, Math.max(0, r));
    if (this.intercept === undefined) {
      const f = Math.min(1, this.L / Math.max(norm(x), 1e-300));
      xs = x.map((v) => v * f);
    } else {
      xs = ontoIntercept(x, this.intercept, this.L, this.interceptCoords);
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
    checkInput(x, r, this.d, this.L, this.intercept, this.interceptCoords);
    const out = this.statistics(x, r).map((v, i) => {
      const y = Math.min(Math.max(this.scale * v, this.rangeLo[i]!), this.rangeHi[i]!);
      const low = Math.floor(y);
      return low + exactBernoulli(y - low, bits);
    });
    if (norm(out) > this.normBound) throw new Error("rounded statistics exceed the stated norm bound");
    return out;
  }
}
