"""The layered private linear regression oracle (Li, Simchi-Levi & Wang, Sec. 4, Algs. 2–6) for
one action in one epoch: the partition tree, the routing of Figure 2, LPLR-PCR (Alg. 4), the
per-bin error bounds (LPLR-CI, Alg. 5, as a closed form) and LPLR-Aggregate (Alg. 6).

Nodes are rows of arrays. Node 0 is the root (layer 0). A node on layer j ≥ 1 is a partitioning
bin: its parent's residuals φ^(j) with ‖φ^(j)‖ ∈ (L 2^{−i}, L 2^{−i+1}], i ∈ 1..J (ρ = L 2^{−i+1});
residuals with ‖φ^(j)‖ ≤ L 2^{−J} (bin i = 0) are not partitioned. After LPLR-PCR a node is
*active* (direction v, coefficient β̂, width w) or inactive (too rare to estimate: Lemma 4.2).

Routing (Figure 2): φ^(1) = φ, y^(1) = y; at layer j the sample is in child i(‖φ^(j)‖) of its
layer-(j−1) bin; if that bin is active, φ^(j+1) = φ^(j) − ⟨v, φ^(j)⟩ v and
y^(j+1) = y^(j) − β̂⟨v, φ^(j)⟩.

Aggregate (docs/lplr.md §5): f̂(φ) = Σ_i β̂_i ⟨v_i, φ⟩ over the active bins on φ's path, and
|f̂(φ) − ⟨θ*, φ⟩| ≤ Σ_i w_i |⟨v_i, φ⟩| + S ‖φ_res‖, φ_res the residual where the path stops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privbandit.shared.core.randomizers.lplr import BlockSums, LPLRRandomizer


@dataclass(frozen=True)
class Route:
    """Where rows stand after routing: node on the target layer (−1: none), residuals."""

    node: np.ndarray
    phi: np.ndarray
    y: np.ndarray | None


class OracleTree:
    """One action's layered oracle in one epoch."""

    def __init__(self, d: int, J: int, L: float, S: float) -> None:
        self.d, self.J, self.L, self.S = d, J, L, S
        self.V = np.zeros((1, d))
        self.beta = np.zeros(1)
        self.width = np.zeros(1)
        self.rho = np.array([L])
        self.layer = np.zeros(1, dtype=np.int64)
        self.active = np.array([True])
        self.child = -np.ones((1, J + 1), dtype=np.int64)
        self.depth = 0  # layers fitted so far
        self._add_children(np.array([0]))

    @property
    def size(self) -> int:
        return int(self.V.shape[0])

    def pending(self, layer: int) -> np.ndarray:
        """Node ids on ``layer`` (the bins a report at that layer may fall in)."""
        return np.flatnonzero(self.layer == layer)

    def _add_children(self, parents: np.ndarray) -> None:
        """Create the J partitioning children of each parent (bins i = 1..J)."""
        if parents.size == 0:
            return
        J, d = self.J, self.d
        n_new = parents.size * J
        start = self.size
        ids = np.arange(start, start + n_new).reshape(parents.size, J)
        self.child[parents, 1:] = ids
        i = np.tile(np.arange(1, J + 1), parents.size)
        self.V = np.vstack([self.V, np.zeros((n_new, d))])
        self.beta = np.concatenate([self.beta, np.zeros(n_new)])
        self.width = np.concatenate([self.width, np.zeros(n_new)])
        self.rho = np.concatenate([self.rho, self.L * 2.0 ** (1 - i)])
        self.layer = np.concatenate([self.layer, np.repeat(self.layer[parents] + 1, J)])
        self.active = np.concatenate([self.active, np.zeros(n_new, dtype=bool)])
        self.child = np.vstack([self.child, -np.ones((n_new, J + 1), dtype=np.int64)])

    def norm_bin(self, norms: np.ndarray) -> np.ndarray:
        """i(‖φ‖): 1..J for ‖φ‖ ∈ (L 2^{−i}, L 2^{−i+1}], 0 for ‖φ‖ ≤ L 2^{−J}."""
        with np.errstate(divide="ignore"):
            i = np.floor(np.log2(self.L / np.maximum(norms, 1e-300))).astype(np.int64) + 1
        i = np.maximum(i, 1)
        return np.where(i > self.J, 0, i)

    def route(self, phi: np.ndarray, y: np.ndarray | None, layer: int) -> Route:
        """Figure 2 down to ``layer``: each row's node on that layer (−1 if its path stopped at
        a non-partitioning or inactive bin) and its residual φ^(layer), y^(layer)."""
        phi = np.array(phi, dtype=float)
        y = None if y is None else np.array(y, dtype=float)
        node = np.zeros(phi.shape[0], dtype=np.int64)
        for j in range(1, layer + 1):
            alive = node >= 0
            nxt = -np.ones_like(node)
            idx = np.flatnonzero(alive)
            nxt[idx] = self.child[node[idx], self.norm_bin(np.linalg.norm(phi[idx], axis=1))]
            if j == layer:
                return Route(nxt, phi, y)
            fit = nxt >= 0
            fit[fit] = self.active[nxt[fit]]
            rows = np.flatnonzero(fit)
            v = self.V[nxt[rows]]
            s = np.einsum("nd,nd->n", phi[rows], v)
            phi[rows] -= s[:, None] * v
            if y is not None:
                y[rows] -= self.beta[nxt[rows]] * s
            node = np.where(fit, nxt, -1)
        return Route(node, phi, y)

    def predict(self, phi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """LPLR-Aggregate (Alg. 6): f̂(φ) and the unscaled width Σ w_i|⟨v_i, φ⟩| + S‖φ_res‖."""
        phi = np.array(phi, dtype=float)
        n = phi.shape[0]
        pred = np.zeros(n)
        width = np.zeros(n)
        node = np.zeros(n, dtype=np.int64)
        for _ in range(self.depth):
            idx = np.flatnonzero(node >= 0)
            if idx.size == 0:
                break
            nxt = self.child[node[idx], self.norm_bin(np.linalg.norm(phi[idx], axis=1))]
            ok = nxt >= 0
            ok[ok] = self.active[nxt[ok]]
            node[idx[~ok]] = -1
            rows, k = idx[ok], nxt[ok]
            v = self.V[k]
            s = np.einsum("nd,nd->n", phi[rows], v)
            pred[rows] += self.beta[k] * s
            width[rows] += self.width[k] * np.abs(s)
            phi[rows] -= s[:, None] * v
            node[rows] = k
        width += self.S * np.linalg.norm(phi, axis=1)
        return pred, width

    def ancestors_width(self, nodes: np.ndarray) -> np.ndarray:
        """Σ of w over the fitted strict ancestors of each node (the bias budget of Lemma 4.3)."""
        parent = self._parents()
        out = np.zeros(nodes.size)
        cur = parent[nodes]
        while (cur > 0).any():
            live = cur > 0
            out[live] += self.width[cur[live]]
            cur = np.where(live, parent[np.maximum(cur, 0)], 0)
        return out

    def ancestor_directions(self, node: int) -> np.ndarray:
        """The directions v of the fitted strict ancestors of ``node`` (rows)."""
        parent = self._parents()
        rows = []
        cur = parent[node]
        while cur > 0:
            rows.append(self.V[cur])
            cur = parent[cur]
        return np.array(rows).reshape(-1, self.d)

    def _parents(self) -> np.ndarray:
        parent = np.zeros(self.size, dtype=np.int64)
        p, i = np.nonzero(self.child >= 0)
        parent[self.child[p, i]] = p
        return parent

    def fit_layer(self, layer: int, nodes: np.ndarray, sums: BlockSums,
                  randomizer: LPLRRandomizer, Y: float, kappa: float, delta: float) -> None:
        """LPLR-PCR (Alg. 4) and the closed-form LPLR-CI width (docs/lplr.md §4) for the bins
        ``nodes`` of ``layer`` from their debiased, rescaled block sums (unnormalised units)."""
        d, S, L = self.d, self.S, self.L
        n = sums.n
        rho = self.rho[nodes]
        count = sums.counts
        U = sums.vectors * (rho * Y)[:, None]
        M = sums.matrices * (rho**2)[:, None, None]
        e_n = randomizer.count_error(n, delta)
        # Typical operator norm of a bin's summed matrix noise (normalised units): 2√d · sd.
        noise_op = 2 * math.sqrt(d) * randomizer.matrix_noise_sd(n)
        active = count >= kappa * randomizer.count_noise_sd(n)
        bias_budget = self.ancestors_width(nodes)
        log = math.log(2 / delta)
        for b in np.flatnonzero(active):
            node = int(nodes[b])
            nh, r = count[b], rho[b]
            P = np.eye(d)
            anc = self.ancestor_directions(node)
            if anc.size:
                P -= anc.T @ anc
            sigma = P @ (M[b] / nh) @ P
            vals, vecs = np.linalg.eigh((sigma + sigma.T) / 2)
            lam, v = vals[-1], vecs[:, -1]
            if lam * nh < kappa * noise_op * r * r:
                continue  # the top eigenvalue is not above the noise: the bin stays inactive
            v = P @ v
            v /= np.linalg.norm(v)
            u_hat = U[b] / nh
            beta = float(np.clip(v @ u_hat / lam, -S, S))
            # Error bounds (docs §4.3): sampling (vector Hoeffding), privacy noise, count error.
            n_k = nh + e_n
            hoeff = 2 * math.sqrt(2 * n_k * log)
            e_u = (r * Y * (hoeff + randomizer.vector_error(n, delta)) + e_n * r * Y) / nh
            e_sig = (r * r * (hoeff + randomizer.matrix_error(n, delta)) + e_n * r * r) / nh
            w = (e_u + S * e_sig + r * L * bias_budget[b]) / lam
            self.V[node] = v
            self.beta[node] = beta
            self.width[node] = min(w, 2 * S)
            self.active[node] = True
        self.depth = layer
        if layer < d:
            self._add_children(nodes[self.active[nodes]])
