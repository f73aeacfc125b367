/**
 * The prover of the generic FLP of the VDAF specification (draft-irtf-cfrg-vdaf-18…20, §7.3.3,
 * after [BBCGGI19] §4.2), ported from shared/crypto/prio3/flp.py — the client side only.
 *
 * For each gadget G of arity A called M times, with P = the next power of two ≥ M + 1, the j-th
 * wire polynomial f_j has f_j(W_P^0) = s_j (a wire seed from the prove randomness),
 * f_j(W_P^k) = the j-th input of the k-th call (k = 1…M) and 0 at the remaining points; the
 * gadget polynomial g = G(f_0, …, f_{A−1}) has degree D·(P − 1) and is sent as its
 * D·(P − 1) + 1 evaluations at the first points of W_N (N = next power of two ≥ that).
 * Proof = [s_0 … s_{A−1}, g(W_N^0) … g(W_N^(D(P−1)))] per gadget.
 */
import { type Field, type FVec, nextPowerOf2 } from "./field.js";

/** P: points of each wire polynomial, the next power of two ≥ 1 + calls (§7.3.2). */
export function wirePolyLen(calls: number): number {
  return nextPowerOf2(1 + calls);
}

/** Evaluations sent for a gadget polynomial: degree · (P − 1) + 1 (§7.3.2). */
export function gadgetPolyLen(degree: number, wireLen: number): number {
  return degree * (wireLen - 1) + 1;
}

/** A non-affine sub-circuit: `evalPoly` maps its ARITY wire polynomials (each P values in the
 * Lagrange basis) to the gadget polynomial's evaluations at the N-th roots of unity. */
export interface Gadget {
  readonly arity: number;
  readonly degree: number;
  evalPoly(field: Field, wires: FVec[]): FVec;
}

/** Mul(x, y) = x · y, degree 2 (§B.1): both wires doubled to 2P evaluations, multiplied. */
export class Mul implements Gadget {
  readonly arity = 2;
  readonly degree = 2;

  evalPoly(field: Field, wires: FVec[]): FVec {
    const a = field.doubleEvaluations(wires[0]!);
    const b = field.doubleEvaluations(wires[1]!);
    return a.map((x, i) => field.mul(x, b[i]!));
  }
}

/** PolyEval_q(x) = q(x) for fixed integer coefficients (§B.2), degree = deg q: the wire is
 * converted to coefficients, evaluated at the n = next power of two ≥ deg q · (P − 1) + 1
 * roots of unity, and q applied pointwise (Horner). */
export class PolyEval implements Gadget {
  readonly arity = 1;
  readonly degree: number;
  private readonly coeffs: bigint[];
  private readonly n: number;

  constructor(coeffs: number[], calls: number) {
    const c = coeffs.slice();
    while (c.length && c[c.length - 1] === 0) c.pop();
    if (!c.length) throw new RangeError("invalid polynomial: zero length");
    this.coeffs = c.map(BigInt);
    this.degree = c.length - 1;
    this.n = nextPowerOf2(gadgetPolyLen(this.degree, wirePolyLen(calls)));
  }

  evalPoly(field: Field, wires: FVec[]): FVec {
    const w = wires[0]!;
    const mon = field.invNtt(w, w.length);
    const coeffs = this.coeffs.map((c) => field.of(c));
    return field.ntt(mon, this.n).map((x) => {
      let acc = coeffs[coeffs.length - 1]!;
      for (let i = coeffs.length - 2; i >= 0; i--) acc = field.add(field.mul(acc, x), coeffs[i]!);
      return acc;
    });
  }
}

/** ParallelSum(G, count) = Σ_i G(x_{iA} … x_{iA+A−1}) (§B.3): arity count · A, degree of G. */
export class ParallelSum implements Gadget {
  readonly arity: number;
  readonly degree: number;

  constructor(
    private readonly sub: Gadget,
    private readonly count: number,
  ) {
    this.arity = sub.arity * count;
    this.degree = sub.degree;
  }

  evalPoly(field: Field, wires: FVec[]): FVec {
    let total: FVec | undefined;
    const a = this.sub.arity;
    for (let i = 0; i < this.count; i++) {
      const out = this.sub.evalPoly(field, wires.slice(i * a, (i + 1) * a));
      total = total === undefined ? out : total.map((x, k) => field.add(x, out[k]!));
    }
    return total!;
  }
}

/** A validity circuit as the prover needs it: its sizes, the encoding of a measurement, and the
 * inputs of every gadget call (per gadget: calls × arity, affine in the measurement). */
export interface Circuit<M> {
  readonly field: Field;
  readonly measLen: number;
  readonly jointRandLen: number;
  readonly gadgets: Gadget[];
  readonly gadgetCalls: number[];
  encode(measurement: M): FVec;
  gadgetInputs(meas: FVec, jointRand: FVec, numShares: number): FVec[][];
}

export function proveRandLen(c: Circuit<unknown>): number {
  return c.gadgets.reduce((n, g) => n + g.arity, 0);
}

export function proofLen(c: Circuit<unknown>): number {
  return c.gadgets.reduce(
    (n, g, i) => n + g.arity + gadgetPolyLen(g.degree, wirePolyLen(c.gadgetCalls[i]!)),
    0,
  );
}

/** The proof of `meas` (§7.3.3 prove): per gadget, its wire seeds and its gadget polynomial's
 * first degree · (P − 1) + 1 evaluations. */
export function prove(c: Circuit<unknown>, meas: FVec, proveRand: FVec, jointRand: FVec): FVec {
  const inputs = c.gadgetInputs(meas, jointRand, 1);
  const out: FVec = [];
  let offset = 0;
  c.gadgets.forEach((g, gi) => {
    const calls = c.gadgetCalls[gi]!;
    const seeds = proveRand.slice(offset, offset + g.arity);
    offset += g.arity;
    const p = wirePolyLen(calls);
    const callInputs = inputs[gi]!;
    const wires: FVec[] = [];
    for (let j = 0; j < g.arity; j++) {
      const w = c.field.zeros(p);
      w[0] = seeds[j]!;
      for (let k = 0; k < calls; k++) w[k + 1] = callInputs[k]![j]!;
      wires.push(w);
    }
    const gpoly = g.evalPoly(c.field, wires);
    out.push(...seeds, ...gpoly.slice(0, gadgetPolyLen(g.degree, p)));
  });
  return out;
}
