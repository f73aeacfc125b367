"""The generic fully linear proof (FLP) of the VDAF specification (draft-irtf-cfrg-vdaf-18…20,
§7.3, after [BBCGGI19] §4.2 with the extensions of §7.3.1.1: joint randomness, several gadget
types, roots of unity as evaluation points, a random linear combination of several outputs).

A validity circuit C(x, r) over a field is built from affine gates and calls of non-affine
"gadgets" G (here: ``Mul``, ``PolyEval``, ``ParallelSum``). x is valid iff every output is 0.

Prover (``prove``, §7.3.3): for each gadget G of arity A called M times, with P = the next power
of two ≥ M + 1 and α = W_P, the j-th wire polynomial f_j is the polynomial of degree < P with
f_j(α^0) = s_j (a random "wire seed" from the prover randomness), f_j(α^k) = the j-th input of
the k-th call (k = 1…M) and 0 at the remaining points; the gadget polynomial is
g = G(f_0, …, f_{A−1}), of degree D·(P − 1) for a degree-D gadget, sent as its
D·(P − 1) + 1 evaluations at the first points of W_N (N = next power of two ≥ that), i.e. in the
Lagrange basis. Proof = [s_0 … s_{A−1}, g(W_N^0) … g(W_N^(D(P−1)))] per gadget.

Verifier (``query``, §7.3.4), run by each aggregator on its additive share of x and of the
proof: the outputs of the calls are read off the gadget polynomial, g(α^k) (so C is evaluated
linearly on shares); the verifier share is [v, f_0(t) … f_{A−1}(t), g(t)] per gadget with v the
output (reduced by a random linear combination when C has several outputs) and t a random
point that must not be a P-th root of unity (else f_j(t) would reveal a wire value).
``decide`` (§7.3.5) on the sum of the shares: v = 0 and G(f_0(t), …, f_{A−1}(t)) = g(t) for
every gadget — the "gadget test": if the proof's g is not G∘f then the two differ at a random t
except with probability ≤ D·(P−1)/|F| (Schwartz–Zippel).

Implementation restriction (documented, exact for every circuit of the spec's Prio3 variants):
a circuit states its gadget inputs as an affine function of (x, r) (``Valid.gadget_inputs``) and
its outputs as an affine function of the gadget outputs and x (``Valid.eval_with``), so that all
M calls of a gadget are evaluated as one vectorised operation. Wire values and outputs are the
same as those of the spec's call-by-call evaluation (``ProveGadget``/``QueryGadget`` of §B.4).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from privbandit.shared.crypto.prio3.field import Field, FVec, _vec, log2_exact, next_power_of_2

Measurement = TypeVar("Measurement")
AggResult = TypeVar("AggResult")


def wire_poly_len(gadget_calls: int) -> int:
    """P: points of each wire polynomial, the next power of two ≥ 1 + calls (§7.3.2)."""
    return next_power_of_2(1 + gadget_calls)


def gadget_poly_len(degree: int, wire_len: int) -> int:
    """Number of evaluations sent for a gadget polynomial: degree · (P − 1) + 1 (§7.3.2)."""
    return degree * (wire_len - 1) + 1


# -- gadgets (§B) -------------------------------------------------------------------------------


class Gadget(ABC):
    """A non-affine sub-circuit: ``eval`` on values (vectorised over the leading axes: an input
    of shape (..., ARITY) gives (...)), ``eval_poly`` on wire polynomials in the Lagrange basis
    (shape (..., ARITY, P) → (..., N) evaluations at the N-th roots of unity)."""

    ARITY: int
    DEGREE: int

    @abstractmethod
    def eval(self, field: type[Field], inp: FVec) -> FVec: ...

    @abstractmethod
    def eval_poly(self, field: type[Field], wires: FVec) -> FVec: ...


class Mul(Gadget):
    """Mul(x, y) = x · y, degree 2 (§B.1). On polynomials: both doubled to 2P evaluations
    (degree of the product ≤ 2P − 2 < 2P) and multiplied pointwise."""

    ARITY = 2
    DEGREE = 2

    def eval(self, field: type[Field], inp: FVec) -> FVec:
        return field.mul(inp[..., 0], inp[..., 1])

    def eval_poly(self, field: type[Field], wires: FVec) -> FVec:
        d = field.double_evaluations(wires)
        return field.mul(d[..., 0, :], d[..., 1, :])


class PolyEval(Gadget):
    """PolyEval_p(x) = p(x) for fixed integer coefficients p (§B.2), degree = deg p. On a
    polynomial f: f is converted to coefficients and evaluated at the n = next power of two ≥
    deg p · (P − 1) + 1 roots of unity, and p is applied pointwise."""

    ARITY = 1

    def __init__(self, coeffs: list[int], num_calls: int) -> None:
        while coeffs and coeffs[-1] == 0:
            coeffs = coeffs[:-1]
        if not coeffs:
            raise ValueError("invalid polynomial: zero length")
        self.coeffs = coeffs
        self.DEGREE = len(coeffs) - 1
        self.n = next_power_of_2(gadget_poly_len(self.DEGREE, wire_poly_len(num_calls)))

    def _horner(self, field: type[Field], x: FVec) -> FVec:
        acc = field.vec(np.full(x.shape, self.coeffs[-1], dtype=object))
        for c in reversed(self.coeffs[:-1]):
            acc = field.add(field.mul(acc, x), c % field.MODULUS)
        return acc

    def eval(self, field: type[Field], inp: FVec) -> FVec:
        return self._horner(field, inp[..., 0])

    def eval_poly(self, field: type[Field], wires: FVec) -> FVec:
        p = wires.shape[-1]
        log2_exact(p)
        mon = field.inv_ntt(wires[..., 0, :], p)
        return self._horner(field, field.ntt(mon, self.n))


class ParallelSum(Gadget):
    """ParallelSum(G, count)(x_0 … x_{count·A−1}) = Σ_i G(x_{iA} … x_{iA+A−1}) (§B.3): arity
    count · A, the degree of G. One gadget call checks ``count`` sub-circuit calls."""

    def __init__(self, subcircuit: Gadget, count: int) -> None:
        self.subcircuit = subcircuit
        self.count = count
        self.ARITY = subcircuit.ARITY * count
        self.DEGREE = subcircuit.DEGREE

    def eval(self, field: type[Field], inp: FVec) -> FVec:
        parts = inp.reshape(inp.shape[:-1] + (self.count, self.subcircuit.ARITY))
        return field.total(self.subcircuit.eval(field, parts), axis=-1)

    def eval_poly(self, field: type[Field], wires: FVec) -> FVec:
        sub = wires.reshape(
            wires.shape[:-2] + (self.count, self.subcircuit.ARITY, wires.shape[-1])
        )
        out = self.subcircuit.eval_poly(field, sub)  # (..., count, N)
        return field.total(out, axis=-2)


# -- validity circuits (§7.3.2) -----------------------------------------------------------------


class Valid(ABC, Generic[Measurement, AggResult]):
    """A validity circuit in the two-phase form this implementation evaluates (module doc)."""

    field: type[Field]
    GADGETS: list[Gadget]
    GADGET_CALLS: list[int]
    MEAS_LEN: int
    JOINT_RAND_LEN: int
    EVAL_OUTPUT_LEN: int
    OUTPUT_LEN: int

    @abstractmethod
    def gadget_inputs(self, meas: FVec, joint_rand: FVec, num_shares: int) -> list[FVec]:
        """For each gadget, the inputs of its calls in call order: shape (calls, ARITY).
        Affine in ``meas``; additions of constants are scaled by 1/num_shares."""

    @abstractmethod
    def eval_with(
        self, meas: FVec, joint_rand: FVec, num_shares: int, gadget_outputs: list[FVec]
    ) -> FVec:
        """The circuit's outputs (length EVAL_OUTPUT_LEN) from the gadgets' outputs (one
        vector of length calls per gadget); affine in ``meas`` and the gadget outputs."""

    def eval(self, meas: FVec, joint_rand: FVec, num_shares: int) -> FVec:
        """C(x, r) evaluated directly (gadgets on values): what ``prove`` commits to."""
        inputs = self.gadget_inputs(meas, joint_rand, num_shares)
        outs = [g.eval(self.field, inp) for g, inp in zip(self.GADGETS, inputs, strict=True)]
        return self.eval_with(meas, joint_rand, num_shares, outs)

    # -- the same over rows (one report per row; shared.crypto.prio3.batch) ----------------------
    # The defaults call the single-report methods row by row; the circuits the services use
    # override them with one vectorised operation over all rows (same values).

    def gadget_inputs_rows(self, meas: FVec, joint_rand: FVec, num_shares: int) -> list[FVec]:
        """``gadget_inputs`` of every row: per gadget, shape (rows, calls, ARITY)."""
        per_row = [self.gadget_inputs(m, r, num_shares)
                   for m, r in zip(meas, joint_rand, strict=True)]
        return [_stack_rows([row[k] for row in per_row],
                            (len(per_row), calls, g.ARITY))
                for k, (g, calls) in enumerate(zip(self.GADGETS, self.GADGET_CALLS,
                                                   strict=True))]

    def wire_evals_rows(
        self, meas: FVec, joint_rand: FVec, num_shares: int, seeds: list[FVec],
        weights: list[FVec],
    ) -> list[FVec]:
        """Per gadget, the wire polynomials of every row evaluated at that row's test point:
        f_j(t) = c_0 s_j + Σ_(k=1..M) c_k in_(k−1, j) with c = the Lagrange weights at t
        (``weights``: (rows, P)), s_j the wire seeds (``seeds``: (rows, ARITY)) and in the
        gadget inputs (the wire polynomial is 0 at the remaining points, which drop out).
        Shape (rows, ARITY) per gadget."""
        p = self.field.MODULUS
        out = []
        inputs = self.gadget_inputs_rows(meas, joint_rand, num_shares)
        for inp, s, w in zip(inputs, seeds, weights, strict=True):
            calls = inp.shape[1]
            acc = (inp * w[:, 1 : calls + 1, None]).sum(axis=1)
            out.append(_vec((s * w[:, :1] + acc) % p))
        return out

    def eval_with_rows(
        self, meas: FVec, joint_rand: FVec, num_shares: int, gadget_outputs: list[FVec]
    ) -> FVec:
        """``eval_with`` of every row: shape (rows, EVAL_OUTPUT_LEN)."""
        rows = [self.eval_with(meas[i], joint_rand[i], num_shares,
                               [o[i] for o in gadget_outputs]) for i in range(meas.shape[0])]
        return _stack_rows(rows, (meas.shape[0], self.EVAL_OUTPUT_LEN))

    def truncate_rows(self, meas: FVec) -> FVec:
        """``truncate`` of every row: shape (rows, OUTPUT_LEN)."""
        return _stack_rows([self.truncate(m) for m in meas], (meas.shape[0], self.OUTPUT_LEN))

    @abstractmethod
    def encode(self, measurement: Measurement) -> FVec: ...

    @abstractmethod
    def truncate(self, meas: FVec) -> FVec: ...

    @abstractmethod
    def decode(self, output: FVec, num_measurements: int) -> AggResult: ...

    def prove_rand_len(self) -> int:
        """One wire seed per input wire of every gadget."""
        return sum(g.ARITY for g in self.GADGETS)

    def query_rand_len(self) -> int:
        """One test point per gadget, plus the output-reduction coefficients if > 1 output."""
        return len(self.GADGETS) + (self.EVAL_OUTPUT_LEN if self.EVAL_OUTPUT_LEN > 1 else 0)

    def proof_len(self) -> int:
        return sum(
            g.ARITY + gadget_poly_len(g.DEGREE, wire_poly_len(c))
            for g, c in zip(self.GADGETS, self.GADGET_CALLS, strict=True)
        )

    def verifier_len(self) -> int:
        return 1 + sum(g.ARITY + 1 for g in self.GADGETS)


def _stack_rows(rows: list[FVec], shape: tuple[int, ...]) -> FVec:
    """Equal-shape object arrays stacked along a new first axis (also for zero rows)."""
    out = np.empty(shape, dtype=object)
    for i, r in enumerate(rows):
        out[i] = r
    return out


# -- the FLP (§7.3.3–7.3.5) ---------------------------------------------------------------------


@dataclass(frozen=True)
class Flp(Generic[Measurement, AggResult]):
    """FLP over a validity circuit: the ``Flp`` interface of §7.1 (FlpBBCGGI19)."""

    valid: Valid[Measurement, AggResult]

    @property
    def field(self) -> type[Field]:
        return self.valid.field

    @property
    def PROVE_RAND_LEN(self) -> int:  # noqa: N802  # the spec's parameter names
        return self.valid.prove_rand_len()

    @property
    def QUERY_RAND_LEN(self) -> int:  # noqa: N802
        return self.valid.query_rand_len()

    @property
    def JOINT_RAND_LEN(self) -> int:  # noqa: N802
        return self.valid.JOINT_RAND_LEN

    @property
    def MEAS_LEN(self) -> int:  # noqa: N802
        return self.valid.MEAS_LEN

    @property
    def OUTPUT_LEN(self) -> int:  # noqa: N802
        return self.valid.OUTPUT_LEN

    @property
    def PROOF_LEN(self) -> int:  # noqa: N802
        return self.valid.proof_len()

    @property
    def VERIFIER_LEN(self) -> int:  # noqa: N802
        return self.valid.verifier_len()

    def encode(self, measurement: Measurement) -> FVec:
        return self.valid.encode(measurement)

    def truncate(self, meas: FVec) -> FVec:
        return self.valid.truncate(meas)

    def decode(self, output: FVec, num_measurements: int) -> AggResult:
        return self.valid.decode(output, num_measurements)

    def _wires(self, seeds: FVec, inputs: FVec, calls: int) -> FVec:
        """Wire polynomials (ARITY, P) in the Lagrange basis: seed, then call inputs, then 0."""
        p = wire_poly_len(calls)
        wires = self.field.zeros(inputs.shape[1] * p).reshape(inputs.shape[1], p)
        wires[:, 0] = seeds
        wires[:, 1 : calls + 1] = inputs.T
        return wires

    def prove(self, meas: FVec, prove_rand: FVec, joint_rand: FVec) -> FVec:
        """The proof: per gadget, its wire seeds and its gadget polynomial's evaluations."""
        v = self.valid
        inputs = v.gadget_inputs(meas, joint_rand, 1)
        parts: list[FVec] = []
        offset = 0
        for g, calls, inp in zip(v.GADGETS, v.GADGET_CALLS, inputs, strict=True):
            seeds = prove_rand[offset : offset + g.ARITY]
            offset += g.ARITY
            wires = self._wires(seeds, inp, calls)
            gpoly = g.eval_poly(self.field, wires)
            parts.append(seeds)
            parts.append(gpoly[: gadget_poly_len(g.DEGREE, wire_poly_len(calls))])
        return np.concatenate(parts)

    def query(
        self, meas: FVec, proof: FVec, query_rand: FVec, joint_rand: FVec, num_shares: int
    ) -> FVec:
        """The verifier (share) of a measurement (share) and proof (share); ValueError if a
        test point is a root of unity of a wire polynomial's domain."""
        f = self.field
        v = self.valid
        if len(proof) != self.PROOF_LEN or len(meas) != self.MEAS_LEN:
            raise ValueError("proof or measurement of the wrong length")
        inputs = v.gadget_inputs(meas, joint_rand, num_shares)
        outputs: list[FVec] = []
        polys: list[FVec] = []
        wire_sets: list[FVec] = []
        offset = 0
        for g, calls, inp in zip(v.GADGETS, v.GADGET_CALLS, inputs, strict=True):
            p = wire_poly_len(calls)
            glen = gadget_poly_len(g.DEGREE, p)
            seeds = proof[offset : offset + g.ARITY]
            gpoly = proof[offset + g.ARITY : offset + g.ARITY + glen]
            offset += g.ARITY + glen
            n = next_power_of_2(glen)
            poly = f.extend_values_to_power_of_2(gpoly, n)
            step = n // p
            # the k-th call's output is g(α^k) = g(W_N^(k·N/P))
            outputs.append(poly[step : step * (calls + 1) : step])
            polys.append(poly)
            wire_sets.append(self._wires(seeds, inp, calls))
        out = v.eval_with(meas, joint_rand, num_shares, outputs)
        qr = list(query_rand)
        if v.EVAL_OUTPUT_LEN > 1:
            coeffs = f.vec(qr[: v.EVAL_OUTPUT_LEN])
            qr = qr[v.EVAL_OUTPUT_LEN :]
            reduced = int(f.dot(coeffs, out))
        else:
            reduced = int(out[0])
        verifier: list[int] = [reduced]
        for t, wires, poly in zip(qr, wire_sets, polys, strict=True):
            t = int(t)
            p = wires.shape[1]
            if pow(t, p, f.MODULUS) == 1:
                raise ValueError("test point is a root of unity")
            verifier.extend(int(x) for x in f.poly_eval_lagrange(wires, t))
            verifier.append(int(f.poly_eval_lagrange(poly, t)))
        return f.vec(verifier)

    def decide(self, verifier: FVec) -> bool:
        """Accept iff the reduced output is 0 and every gadget test holds."""
        if len(verifier) != self.VERIFIER_LEN:
            return False
        if int(verifier[0]) != 0:
            return False
        offset = 1
        for g in self.valid.GADGETS:
            wire_checks = verifier[offset : offset + g.ARITY]
            gadget_check = int(verifier[offset + g.ARITY])
            offset += g.ARITY + 1
            if int(g.eval(self.field, wire_checks)) != gadget_check:
                return False
        return True
