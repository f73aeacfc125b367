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

/** Relative slack on an intercept ⟨e, x⟩ = c (base.INTERCEPT_TOLERANCE). */
export const INTERCEPT_TOLERANCE = 1e-9;

/** The default intercept coordinates E = {0}: x[0] = c. */
export const FIRST_COORD: readonly number[] = [0];

/** base.off_intercept: the intercept value (x[0], or ⟨e, x⟩) is not c beyond the relative
 * slack INTERCEPT_TOLERANCE. */
export function offIntercept(value: number, c: number): boolean {
  return Math.abs(value - c) > INTERCEPT_TOLERANCE * Math.max(1, c);
}

function isFirstOnly(coords: readonly number[]): boolean {
  return coords.length === 1 && coords[0] === 0;
}

/** ⟨e, x⟩, e the indicator of the intercept coordinates E (base.intercept_values): x[0] for
 * E = {0}; else the sum over E in increasing order, as numpy sums those few values (left to
 * right), so the check agrees with the Python's to the bit. */
export function interceptValue(x: readonly number[], coords: readonly number[] = FIRST_COORD): number {
  if (isFirstOnly(coords)) return x[0]!;
  let s = x[coords[0]!]!;
  for (let m = 1; m < coords.length; m++) s += x[coords[m]!]!;
  return s;
}

/** The intercept condition in words, for error messages (base.intercept_rule). */
export function interceptRule(c: number, coords: readonly number[] = FIRST_COORD): string {
  if (isFirstOnly(coords)) return `x[0] = ${c}`;
  return `the sum of x at coordinates [${coords.join(", ")}] = ${c}`;
}

/** The intercept coordinates E as the Python config accepts them (policies.config with
 * skellam.check_intercept_coords): at least one integer, increasing (so distinct), each in
 * [0, d). They are returned as given; RangeError otherwise, since a device whose E differs
 * from the analyzer's would check, project and bound other statistics than it decodes. */
export function checkInterceptCoords(coords: unknown, d: number): number[] {
  const ok = Array.isArray(coords) && coords.length >= 1
    && coords.every((v, m) => Number.isInteger(v) && v >= 0 && v < d
      && (m === 0 || v > (coords[m - 1] as number)));
  if (!ok) {
    throw new RangeError(`intercept_coords must be increasing indices in [0, ${d}), at least `
      + `one; got ${JSON.stringify(coords)}`);
  }
  return [...(coords as number[])];
}

/** Refuse (RangeError) what the Python device refuses (base.check_centered_inputs): x of the
 * wrong length or not finite, ‖x‖ > L(1 + 1e-9), r outside [0, 1]; and ⟨e, x⟩ ≠ c (x[0] ≠ c
 * for E = {0}) when the task has an intercept c. */
export function checkInput(x: readonly number[], r: number, d: number, L: number, intercept?: number,
  coords: readonly number[] = FIRST_COORD): void {
  if (x.length !== d) throw new RangeError(`x must have ${d} entries, got ${x.length}`);
  if (!x.every(Number.isFinite) || !Number.isFinite(r)) throw new RangeError("x and r must be finite");
  if (norm(x) > L * (1 + 1e-9)) throw new RangeError(`feature vectors must satisfy ||x|| <= L = ${L}`);
  if (!(r >= 0 && r <= 1)) throw new RangeError("rewards must lie in [0, 1]");
  if (intercept !== undefined && offIntercept(interceptValue(x, coords), intercept)) {
    throw new RangeError(`the task needs ${interceptRule(intercept, coords)} in every context`);
  }
}

/** x projected onto {x₀ = c, ‖x‖ ≤ L}: x₀ set to c, the rest clipped to norm √(L² − c²)
 * (skellam.onto_intercept; a checked context is unchanged). With intercept coordinates E ≠ {0}
 * (k = |E|; per-arm features): onto {⟨e, x⟩ = c, ‖x‖ ≤ L}, the ball of radius √(L² − c²/k)
 * about (c/k) e in that hyperplane (skellam.onto_intercept_direction, its arithmetic step by
 * step): x − (⟨e, x⟩/k) e clipped to the radius, plus (c/k) e. */
export function ontoIntercept(x: readonly number[], c: number, L: number,
  coords: readonly number[] = FIRST_COORD): number[] {
  if (!isFirstOnly(coords)) return ontoInterceptDirection(x, c, L, coords);
  const rest = x.slice(1);
  const n = norm(rest);
  const room = Math.sqrt(Math.max(L * L - c * c, 0));
  const f = Math.min(1, room / Math.max(n, 1e-300));
  return [c, ...rest.map((v) => v * f)];
}

function ontoInterceptDirection(x: readonly number[], c: number, L: number,
  coords: readonly number[]): number[] {
  const k = coords.length;
  const inE = new Array<boolean>(x.length).fill(false);
  for (const i of coords) inE[i] = true;
  const along = interceptValue(x, coords) / k;
  const rest = x.map((v, i) => (inE[i] ? v - along : v));
  const room = Math.sqrt(Math.max(L * L - (c * c) / k, 0));
  const f = Math.min(1, room / Math.max(norm(rest), 1e-300));
  const ck = c / k;
  return rest.map((v, i) => (inE[i] ? v * f + ck : v * f));
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
