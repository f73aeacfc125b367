"""LPLR-Update's local randomizer (Li, Simchi-Levi & Wang, Alg. 3; Prop. 4.1) — device side.

A report of one user at layer j of an epoch covers every *block* b = (action, bin) that the
analyzer broadcast for that layer (all K oracles, all pending partitioning bins). The user's clean
contribution is zero in every block except at most one — the block (a_t, k) of her chosen action
and the bin k her revised vector φ^(j) falls in — where it is

    count 1,   z = y^(j) φ^(j) / (ρ_k Y) ∈ R^d,   U = φ^(j) φ^(j)ᵀ / ρ_k²,

with ρ_k the bin's norm bound (‖φ^(j)‖ ≤ ρ_k) and Y the bound on |y^(j)|, so ‖z‖ ≤ 1, ‖U‖ ≤ 1.
The analyzer rescales block sums by ρ_k Y and ρ_k² (heterogeneous noise across bins, Sec. 4.3).

Sensitivities (replacement neighbours, docs/lplr.md §3): two users' clean reports differ in at
most two blocks, so the L1 distances are at most

    counts 2,   vectors 2·√d (‖z‖₁ ≤ √d ‖z‖₂),   upper(U) 2·(d + 1)/2 = d + 1
    (Σ_{i≤j} |u_i u_j| = (‖u‖₁² + ‖u‖₂²)/2 ≤ (d + 1)/2 for ‖u‖ ≤ 1),

and Laplace noise of scale Δ/ε_part on every coordinate of every block is ε_part-LDP; the three
parts compose to ε = ε_count + ε_vector + ε_matrix.

``matrix_noise = "wishart"`` replaces the matrix part by the paper's Wishart mechanism (Jiang et
al. 2016): U + W per block, W ~ W_d(d + 1, c I), c = 1/(2 ε_matrix). On the common support its
density ratio is exp((tr U − tr U')/(2c)) ≤ e^{ε_matrix}; but the support {S ≻ U} moves with U,
and P(W − U' not positive definite) = 1 − exp(−tr U'/(2c)) ≤ 1 − e^{−ε_matrix}, so it is
(ε_matrix, 1 − e^{−ε_matrix})-DP and no smaller δ holds at that ε (docs/lplr.md §3.3).

Aggregation: the sum of n independent Laplace(b) draws is Gamma(n, b) − Gamma(n, b), and the sum
of n Wishart W_d(ν, C) draws is W_d(nν, C); ``aggregate_noise`` samples the sum of n devices'
noise in one draw with exactly that distribution (the simulator's fast path).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privbandit.shared.core.randomizers.base import symmetric_from_upper, upper_indices


@dataclass(frozen=True)
class BlockSums:
    """Per-block sums of n reports: counts (B,), vectors z (B, d), matrices U (B, d, d)."""

    n: int
    counts: np.ndarray
    vectors: np.ndarray
    matrices: np.ndarray

    def __add__(self, other: BlockSums) -> BlockSums:
        return BlockSums(self.n + other.n, self.counts + other.counts,
                         self.vectors + other.vectors, self.matrices + other.matrices)


def laplace_sum(n: int, scale: float, size: tuple[int, ...], rng: np.random.Generator
                ) -> np.ndarray:
    """The sum of n i.i.d. Laplace(0, scale) draws, exactly: Gamma(n, scale) − Gamma(n, scale)."""
    if n < 1:
        raise ValueError("n must be >= 1")
    return rng.gamma(n, scale, size) - rng.gamma(n, scale, size)


def laplace_sum_bound(n: int, scale: float, delta: float) -> float:
    """t with P(|Σ_{i≤n} Lap(b)| ≥ t) ≤ δ: Laplace(b) is sub-exponential (ν² = 4b², α = 2b)
    because E e^{λX} = 1/(1 − b²λ²) ≤ e^{2b²λ²} for |λ| ≤ 1/(2b); Bernstein for the sum gives
    t = 2b√(2n ln(2/δ)) + 4b ln(2/δ)."""
    log = math.log(2 / delta)
    return 2 * scale * math.sqrt(2 * n * log) + 4 * scale * log


def wishart_deviation_bound(nu: float, d: int, c: float, delta: float) -> float:
    """t with P(‖W − ν c I‖_op ≥ t) ≤ δ for W ~ W_d(ν, cI) = c GᵀG, G ν×d standard Gaussian:
    √ν − √d − s ≤ σ(G) ≤ √ν + √d + s with probability 1 − 2e^{−s²/2} (Davidson–Szarek), so
    ‖GᵀG − νI‖ ≤ (√d + s)² + 2√ν (√d + s), s = √(2 ln(2/δ))."""
    s = math.sqrt(2 * math.log(2 / delta)) + math.sqrt(d)
    return c * (s * s + 2 * math.sqrt(nu) * s)


class LPLRRandomizer:
    """ε-LDP randomizer of one LPLR report; all calibration constants are attributes."""

    def __init__(self, d: int, epsilon: float, count_share: float, vector_share: float,
                 matrix_noise: str = "laplace") -> None:
        if matrix_noise not in ("laplace", "wishart"):
            raise ValueError("matrix_noise must be 'laplace' or 'wishart'")
        if not (epsilon > 0 and 0 < count_share and 0 < vector_share
                and count_share + vector_share < 1):
            raise ValueError("need ε > 0 and positive shares summing below 1")
        self.d = d
        self.epsilon = epsilon
        self.matrix_noise = matrix_noise
        self.eps_count = epsilon * count_share
        self.eps_vector = epsilon * vector_share
        self.eps_matrix = epsilon - self.eps_count - self.eps_vector
        # L1 sensitivities of the whole report (two blocks may differ).
        self.count_sensitivity = 2.0
        self.vector_sensitivity = 2.0 * math.sqrt(d)
        self.matrix_sensitivity = float(d + 1)
        self.count_scale = self.count_sensitivity / self.eps_count
        self.vector_scale = self.vector_sensitivity / self.eps_vector
        self.matrix_scale = self.matrix_sensitivity / self.eps_matrix  # Laplace on upper(U)
        self.wishart_df = d + 1
        self.wishart_c = 1.0 / (2.0 * self.eps_matrix)
        self._iu = upper_indices(d)

    @property
    def delta(self) -> float:
        """δ of the report: 0 with Laplace matrix noise; 1 − e^{−ε_matrix} with Wishart."""
        return 0.0 if self.matrix_noise == "laplace" else -math.expm1(-self.eps_matrix)

    # --- device side -------------------------------------------------------------------------
    def clean(self, block: np.ndarray, u: np.ndarray, z: np.ndarray, n_blocks: int) -> BlockSums:
        """Noise-free per-block sums of n users: user i adds (1, z_i, u_i u_iᵀ) to block[i]
        (block −1: she falls in no broadcast bin and adds nothing). Validates ‖u‖, ‖z‖ ≤ 1."""
        block = np.asarray(block, dtype=np.int64)
        u = np.asarray(u, dtype=float).reshape(-1, self.d)
        z = np.asarray(z, dtype=float).reshape(-1, self.d)
        if not (block.shape[0] == u.shape[0] == z.shape[0]):
            raise ValueError("block, u and z need one row per user")
        if (block >= n_blocks).any() or (block < -1).any():
            raise ValueError("block index out of range")
        if not (np.isfinite(u).all() and np.isfinite(z).all()):
            raise ValueError("u and z must be finite")
        tol = 1 + 1e-9
        if (np.linalg.norm(u, axis=1) > tol).any() or (np.linalg.norm(z, axis=1) > tol).any():
            raise ValueError("normalised vectors must satisfy ‖u‖ ≤ 1 and ‖z‖ ≤ 1")
        keep = block >= 0
        b, u, z = block[keep], u[keep], z[keep]
        counts = np.bincount(b, minlength=n_blocks).astype(float)
        vectors = np.zeros((n_blocks, self.d))
        np.add.at(vectors, b, z)
        matrices = np.zeros((n_blocks, self.d, self.d))
        np.add.at(matrices, b, u[:, :, None] * u[:, None, :])
        return BlockSums(int(block.shape[0]), counts, vectors, matrices)

    def report(self, block: int, u: np.ndarray, z: np.ndarray, n_blocks: int,
               rng: np.random.Generator) -> BlockSums:
        """One device's randomised report: its clean blocks plus fresh noise in every block."""
        return self.clean(np.array([block]), u, z, n_blocks) + self._noise(1, n_blocks, rng)

    def aggregate_noise(self, n: int, n_blocks: int, rng: np.random.Generator) -> BlockSums:
        """The sum of n devices' noise, drawn in one step with exactly its distribution."""
        noise = self._noise(n, n_blocks, rng)
        return BlockSums(0, noise.counts, noise.vectors, noise.matrices)

    def _noise(self, n: int, n_blocks: int, rng: np.random.Generator) -> BlockSums:
        d = self.d
        counts = laplace_sum(n, self.count_scale, (n_blocks,), rng)
        vectors = laplace_sum(n, self.vector_scale, (n_blocks, d), rng)
        if self.matrix_noise == "laplace":
            upper = laplace_sum(n, self.matrix_scale, (n_blocks, len(self._iu[0])), rng)
            matrices = np.stack([symmetric_from_upper(row, d) for row in upper]) if n_blocks \
                else np.zeros((0, d, d))
        else:
            matrices = self.wishart_sum(n, n_blocks, rng)
        return BlockSums(0, counts, vectors, matrices)

    def wishart_sum(self, n: int, n_blocks: int, rng: np.random.Generator) -> np.ndarray:
        """Σ of n W_d(d + 1, cI) draws per block = W_d(n(d + 1), cI)."""
        if n_blocks == 0:
            return np.zeros((0, self.d, self.d))
        from scipy.stats import wishart  # here: scipy.stats costs a second of start-up

        draws = wishart.rvs(df=n * self.wishart_df, scale=self.wishart_c * np.eye(self.d),
                            size=n_blocks, random_state=rng)
        return np.asarray(draws).reshape(n_blocks, self.d, self.d)

    # --- analyzer side -----------------------------------------------------------------------
    def matrix_bias(self, n: int) -> float:
        """E of the summed matrix noise of n reports is this times I (Wishart mean ν c I)."""
        return 0.0 if self.matrix_noise == "laplace" else n * self.wishart_df * self.wishart_c

    def debiased(self, sums: BlockSums) -> BlockSums:
        """Unbiased block sums: Laplace noise has mean 0; the Wishart mean n(d+1)c I is removed."""
        bias = self.matrix_bias(sums.n) * np.eye(self.d)
        return BlockSums(sums.n, sums.counts, sums.vectors, sums.matrices - bias)

    def count_error(self, n: int, delta: float) -> float:
        """Bound on |noise of one block's summed count| at level δ."""
        return laplace_sum_bound(n, self.count_scale, delta)

    def vector_error(self, n: int, delta: float) -> float:
        """Bound on ‖noise of one block's summed z‖₂ at level δ (union over d coordinates)."""
        return math.sqrt(self.d) * laplace_sum_bound(n, self.vector_scale, delta / self.d)

    def matrix_error(self, n: int, delta: float) -> float:
        """Bound on ‖(debiased) noise of one block's summed U‖_F at level δ."""
        if self.matrix_noise == "laplace":
            entries = len(self._iu[0])
            return self.d * laplace_sum_bound(n, self.matrix_scale, delta / entries)
        return math.sqrt(self.d) * wishart_deviation_bound(
            n * self.wishart_df, self.d, self.wishart_c, delta)

    def matrix_noise_sd(self, n: int) -> float:
        """Standard deviation of one entry of the summed matrix noise of n reports."""
        if self.matrix_noise == "laplace":
            return self.matrix_scale * math.sqrt(2 * n)
        return self.wishart_c * math.sqrt(n * self.wishart_df * 2)  # diagonal: c²·2ν

    def count_noise_sd(self, n: int) -> float:
        return self.count_scale * math.sqrt(2 * n)
