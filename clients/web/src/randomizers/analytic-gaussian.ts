/**
 * The analytic Gaussian calibration (Balle & Wang, ICML 2018, Theorem 8), as
 * shared/core/accounting/gaussian.py: N(0, σ²) on a function of L2 sensitivity Δ is (ε, δ)-DP
 * iff δ ≥ Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ); `gaussianSigma` is the smallest such σ.
 *
 * log Φ comes from the scaled complementary error function erfcx(y) = e^{y²} erfc(y), by the
 * rational Chebyshev approximations of W. J. Cody, "Rational Chebyshev approximations for the
 * error function", Math. Comp. 23 (1969) 631–637 (three intervals, relative error below 1e-16
 * in double precision): log Φ(x) = log(½ erfcx(−x/√2)) − x²/2 for x < 0 never underflows.
 */

// Cody (1969), the coefficients of the three intervals |y| ≤ 0.46875, ≤ 4, > 4.
const A = [3.1611237438705656, 113.864154151050156, 377.485237685302021, 3209.37758913846947,
  0.185777706184603153];
const B = [23.6012909523441209, 244.024637934444173, 1282.61652607737228, 2844.23683343917062];
const C = [0.564188496988670089, 8.88314979438837594, 66.1191906371416295, 298.635138197400131,
  881.95222124176909, 1712.04761263407058, 2051.07837782607147, 1230.33935479799725,
  2.15311535474403846e-8];
const D = [15.7449261107098347, 117.693950891312499, 537.181101862009858, 1621.38957456669019,
  3290.79923573345963, 4362.61909014324716, 3439.36767414372164, 1230.33935480374942];
const P = [0.305326634961232344, 0.360344899949804439, 0.125781726111229246,
  0.0160837851487422766, 6.58749161529837803e-4, 0.0163153871373020978];
const Q = [2.56852019228982242, 1.87295284992346047, 0.527905102951428412,
  0.0605183413124413191, 0.00233520497626869185];
const RSQRTPI = 0.5641895835477562869;

/** erfcx(y) = e^{y²} erfc(y) for y ≥ 0. */
export function erfcx(y: number): number {
  if (!(y >= 0)) throw new RangeError("erfcx here is for y >= 0");
  if (y <= 0.46875) {
    const z = y * y;
    let num = A[4]! * z;
    let den = z;
    for (let i = 0; i < 3; i++) {
      num = (num + A[i]!) * z;
      den = (den + B[i]!) * z;
    }
    const erf = (y * (num + A[3]!)) / (den + B[3]!);
    return Math.exp(z) * (1 - erf);
  }
  if (y <= 4) {
    let num = C[8]! * y;
    let den = y;
    for (let i = 0; i < 7; i++) {
      num = (num + C[i]!) * y;
      den = (den + D[i]!) * y;
    }
    return (num + C[7]!) / (den + D[7]!);
  }
  const z = 1 / (y * y);
  let num = P[5]! * z;
  let den = z;
  for (let i = 0; i < 4; i++) {
    num = (num + P[i]!) * z;
    den = (den + Q[i]!) * z;
  }
  return (RSQRTPI - (z * (num + P[4]!)) / (den + Q[4]!)) / y;
}

/** log Φ(x), Φ the standard normal CDF, accurate in both tails. */
export function logNdtr(x: number): number {
  if (x < 0) return Math.log(0.5 * erfcx(-x / Math.SQRT2)) - (x * x) / 2;
  const y = x / Math.SQRT2;
  return Math.log1p(-0.5 * erfcx(y) * Math.exp(-y * y));
}

/** log δ(ε; σ) of Theorem 8, written Φ(a)(1 − exp(ε + log Φ(b) − log Φ(a))) (no cancellation). */
export function logGaussianDelta(eps: number, sigma: number, sensitivity: number): number {
  const a = sensitivity / (2 * sigma) - (eps * sigma) / sensitivity;
  const b = -sensitivity / (2 * sigma) - (eps * sigma) / sensitivity;
  const logPa = logNdtr(a);
  const x = eps + logNdtr(b) - logPa;
  if (x >= 0) return -Infinity;
  return logPa + Math.log(-Math.expm1(x));
}

// σ by (ε, δ, Δ): a page builds a randomizer per report, with the same few calibrations (as
// Python's lru_cache on gaussian_sigma).
const calibrated = new Map<string, number>();

/** The smallest σ (to a few ulps) with δ(ε; σ) ≤ δ: bisection on log σ (δ is decreasing in σ),
 * then nudged up until the inequality holds, so the σ returned is always sufficient. */
export function gaussianSigma(eps: number, delta: number, sensitivity: number): number {
  const key = `${eps}|${delta}|${sensitivity}`;
  let sigma = calibrated.get(key);
  if (sigma === undefined) {
    sigma = calibrate(eps, delta, sensitivity);
    if (calibrated.size >= 256) calibrated.clear();
    calibrated.set(key, sigma);
  }
  return sigma;
}

function calibrate(eps: number, delta: number, sensitivity: number): number {
  if (!(eps >= 0 && Number.isFinite(eps))) throw new RangeError("eps must be finite and >= 0");
  if (!(sensitivity > 0 && Number.isFinite(sensitivity))) throw new RangeError("sensitivity must be positive");
  if (!(delta > 0 && delta < 1)) throw new RangeError("delta must be in (0, 1)");
  const target = Math.log(delta);
  const f = (ls: number) => logGaussianDelta(eps, Math.exp(ls), sensitivity) - target;
  let lo = Math.log(sensitivity) - 10;
  while (f(lo) <= 0) lo -= 10;
  let hi = Math.log(sensitivity);
  while (f(hi) > 0) hi += 2;
  for (let i = 0; i < 200; i++) {
    const mid = (lo + hi) / 2;
    if (mid <= lo || mid >= hi) break;
    if (f(mid) > 0) lo = mid;
    else hi = mid;
  }
  let sigma = Math.exp(hi);
  while (logGaussianDelta(eps, sigma, sensitivity) > target) sigma *= 1 + 2 ** -52;
  return sigma;
}
