/**
 * What the linear randomizers share (shared/core/randomizers/base.py and skellam.py): the
 * upper-triangle order, input checks, the intercept rule and the projection onto it.
 */

/** Row/column indices of the upper triangle of a d×d matrix, diagonal included, row-major:
 * (0,0), (0,1), …, (0,d−1), (1,1), … — the order of upper(x xᵀ) on the wire. */
export function upperIndices(d: number): [number[], number[]] {
  const rows: number[] = [];
  const cols: number[] = [];
  for (let i = 0; i < d; i++) for (let j = i; j < d; j++) {
    rows.push(i);
    cols.push(j);
  }
  return [rows, cols];
}

export function norm(x: readonly number[]): number {
  return Math.sqrt(x.reduce((s, v) => s + v * v, 0));
}

/** Relative slack on an intercept x[0] = c (base.INTERCEPT_TOLERANCE). */
export const INTERCEPT_TOLERANCE = 1e-9;

export function offIntercept(first: number, c: number): boolean {
  return Math.abs(first - c) > INTERCEPT_TOLERANCE * Math.max(1, c);
}

/** Refuse (RangeError) what the Python device refuses: x of the wrong length or not finite,
 * ‖x‖ > L(1 + 1e-9), r outside [0, 1]; and x[0] ≠ c when the task has an intercept c. */
export function checkInput(x: readonly number[], r: number, d: number, L: number, intercept?: number): void {
  if (x.length !== d) throw new RangeError(`x must have ${d} entries, got ${x.length}`);
  if (!x.every(Number.isFinite) || !Number.isFinite(r)) throw new RangeError("x and r must be finite");
  if (norm(x) > L * (1 + 1e-9)) throw new RangeError(`feature vectors must satisfy ||x|| <= L = ${L}`);
  if (!(r >= 0 && r <= 1)) throw new RangeError("rewards must lie in [0, 1]");
  if (intercept !== undefined && offIntercept(x[0]!, intercept)) {
    throw new RangeError(`the task needs x[0] = ${intercept} in every context`);
  }
}

/** x projected onto {x₀ = c, ‖x‖ ≤ L}: x₀ set to c, the rest clipped to norm √(L² − c²)
 * (skellam.onto_intercept; a checked context is unchanged). */
export function ontoIntercept(x: readonly number[], c: number, L: number): number[] {
  const rest = x.slice(1);
  const n = norm(rest);
  const room = Math.sqrt(Math.max(L * L - c * c, 0));
  const f = Math.min(1, room / Math.max(n, 1e-300));
  return [c, ...rest.map((v) => v * f)];
}

/** The intercept rule of the centered encodings: 0 < c ≤ L, given exactly when needed. */
export function checkIntercept(centered: boolean, intercept: number | undefined, L: number): void {
  if (centered) {
    if (intercept === undefined || !(intercept > 0 && intercept <= L && Number.isFinite(intercept))) {
      throw new RangeError(`the centered encodings need an intercept c with 0 < c <= L=${L}`);
    }
  } else if (intercept !== undefined) {
    throw new RangeError("only the centered encodings take an intercept");
  }
}
