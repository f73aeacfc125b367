/**
 * The local decision of the linear tasks (docs/protocol.md §4; shared/core/policies/model.py,
 * services/device/decisions.py and families.py): among the K arms' features x_a choose
 *
 *     argmax_a ⟨x_a, θ̃⟩ + β ‖x_a‖_{V⁻¹},   ‖x‖_{V⁻¹} = ‖W x‖₂, W = chol(V)⁻¹,
 *
 * ties to the lowest index (a rule, not a coin), so the chosen arm's propensity is 1. With
 * β = 0 the index is ⟨x_a, θ̃⟩ alone (as the Python device). The features are checked as the
 * device's decide checks them (K rows of d finite numbers, ‖x‖ ≤ L(1 + 1e-9), x[0] = c under an
 * intercept); a model is refused unless V is symmetric positive definite.
 */
import { FIRST_COORD, interceptRule, interceptValue, norm, offIntercept } from "./randomizers/common.js";

/** The linear model of a `ModelMessage` (θ̃, V, β, version). */
export interface LinearModel {
  version: number;
  theta: number[];
  V: number[][];
  beta: number;
}

export interface Decision {
  action: number;
  /** the probability the model gave `action`: 1 (deterministic argmax) */
  propensity: number;
  /** the indices ⟨x_a, θ̃⟩ + β ‖x_a‖_{V⁻¹}, for display */
  scores: number[];
}

/** A model ready to decide with: W = chol(V)⁻¹ computed once per model. */
export class Decider {
  readonly d: number;
  private readonly W: number[][] | null;

  constructor(readonly model: LinearModel) {
    const { theta, V, beta } = model;
    const d = theta.length;
    if (d < 1 || !theta.every(Number.isFinite)) throw new RangeError("theta must be finite numbers");
    if (!(Number.isFinite(beta) && beta >= 0)) throw new RangeError("beta must be finite and >= 0");
    if (V.length !== d || !V.every((row) => row.length === d && row.every(Number.isFinite))) {
      throw new RangeError(`V must be a finite ${d}x${d} matrix`);
    }
    for (let i = 0; i < d; i++) for (let j = 0; j < i; j++) {
      if (V[i]![j] !== V[j]![i]) throw new RangeError("V must be symmetric");
    }
    this.d = d;
    this.W = beta === 0 ? null : inverseLower(cholesky(V));
  }

  /** The indices of the K arms (rows of X, already checked). */
  scores(X: readonly (readonly number[])[]): number[] {
    const { theta, beta } = this.model;
    return X.map((x) => {
      let index = dot(x, theta);
      if (this.W !== null) index += beta * norm(this.W.map((row) => dot(row, x)));
      return index;
    });
  }

  decide(X: readonly (readonly number[])[]): Decision {
    const scores = this.scores(X);
    let action = 0;
    for (let a = 1; a < scores.length; a++) if (scores[a]! > scores[action]!) action = a;
    return { action, propensity: 1, scores };
  }
}

/** Refuse (RangeError) features the Python device's decide refuses: not K rows of d finite
 * numbers, a row with ‖x‖ > L(1 + 1e-9), or ⟨e, x⟩ ≠ c when the task has an intercept c over
 * its intercept coordinates E (`coords`, default [0]: x[0] = c; per-arm features: every block
 * start). */
export function checkFeatures(
  X: readonly (readonly number[])[], K: number, d: number, L: number, intercept?: number,
  coords: readonly number[] = FIRST_COORD,
): void {
  if (X.length !== K) throw new RangeError(`the task has K = ${K} arms, got ${X.length} rows`);
  X.forEach((row, i) => {
    if (row.length !== d) throw new RangeError(`the task has d = ${d}; row ${i} has ${row.length}`);
    if (!row.every(Number.isFinite)) throw new RangeError("features must be finite numbers");
    if (dot(row, row) > (L * (1 + 1e-9)) ** 2) {
      throw new RangeError(`every feature vector must satisfy ||x|| <= L = ${L}; row ${i} has ||x|| = ${norm(row)}`);
    }
    const value = intercept === undefined ? 0 : interceptValue(row, coords);
    if (intercept !== undefined && offIntercept(value, intercept)) {
      const where = coords.length === 1 && coords[0] === 0 ? "x[0]" : `the sum of x at [${coords.join(", ")}]`;
      throw new RangeError(`the task has the intercept ${interceptRule(intercept, coords)}; row ${i} has ${where} = ${value}`);
    }
  });
}

function dot(a: readonly number[], b: readonly number[]): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i]! * b[i]!;
  return s;
}

/** The lower Cholesky factor of a symmetric positive definite matrix. */
export function cholesky(V: readonly (readonly number[])[]): number[][] {
  const d = V.length;
  const Lm = Array.from({ length: d }, () => new Array<number>(d).fill(0));
  for (let j = 0; j < d; j++) {
    let s = V[j]![j]!;
    for (let k = 0; k < j; k++) s -= Lm[j]![k]! ** 2;
    if (!(s > 0)) throw new RangeError("V must be positive definite");
    const ljj = Math.sqrt(s);
    Lm[j]![j] = ljj;
    for (let i = j + 1; i < d; i++) {
      let t = V[i]![j]!;
      for (let k = 0; k < j; k++) t -= Lm[i]![k]! * Lm[j]![k]!;
      Lm[i]![j] = t / ljj;
    }
  }
  return Lm;
}

/** The inverse of a lower-triangular matrix (forward substitution on the identity). */
function inverseLower(Lm: number[][]): number[][] {
  const d = Lm.length;
  const W = Array.from({ length: d }, () => new Array<number>(d).fill(0));
  for (let c = 0; c < d; c++) {
    for (let i = c; i < d; i++) {
      let s = i === c ? 1 : 0;
      for (let k = c; k < i; k++) s -= Lm[i]![k]! * W[k]![c]!;
      W[i]![c] = s / Lm[i]![i]!;
    }
  }
  return W;
}
