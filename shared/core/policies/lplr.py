"""LPLR with action elimination — Li, Simchi-Levi & Wang (arXiv 2404.09413), Algorithm 1
(RegCB.Elimination) over the layered private linear regression oracle (Algs. 2–6).

Epoch m has τ_m = τ_1·2^{m−1} users, split into d groups of n_m = ⌈τ_m/d⌉ (group j trains layer j
of the epoch's oracles). Every user of epoch m:

1. computes her active set A_m(x) = {a : a survived every finished epoch m' < m}, where a survives
   m' if f̂_{m'}(x, a) + ŵ_{m'}(x, a) ≥ max_{b ∈ A_{m'}(x)} f̂_{m'}(x, b) − ŵ_{m'}(x, b) (Alg. 1
   line 8; the oracles' intervals are uniform in x, so the chain is evaluated on the device);
2. plays a uniformly random a_t ∈ A_m(x) (Alg. 1 line 5);
3. reports to all K oracles of epoch m at once: her (φ(x, a_t), y_t) to oracle a_t and the empty
   context (φ = 0, y = 0, which lies in no partitioning bin) to the others — one ε-LDP report
   (``shared.core.randomizers.lplr``).

After group j the analyzer fits layer j of all K oracles (LPLR-PCR and the CI widths) and
broadcasts it; after group d the epoch's oracles are final and join the elimination chain.
Derivation and every constant: docs/lplr.md.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from privbandit.shared.core.accounting.ledger import Aggregation, PrivacyLedger, SecureSum
from privbandit.shared.core.policies.linear import LinearPolicy
from privbandit.shared.core.policies.lplr_config import LPLRConfig
from privbandit.shared.core.policies.lplr_tree import OracleTree
from privbandit.shared.core.randomizers.lplr import BlockSums, LPLRRandomizer

MAX_EPOCHS = 64  # union bound of the failure probability over epochs (τ_1·2^63 users suffice)
INEQUALITIES_PER_BIN = 6  # count, sampling (u, Σ), noise (u, Σ) and one spare, per bin


class LPLR(LinearPolicy[LPLRConfig, LPLRRandomizer]):
    algo = "lplr"
    threat_model = "ldp"

    def __init__(self, config: LPLRConfig, rng: np.random.Generator | None = None) -> None:
        super().__init__(config, rng)
        self.finished: list[list[OracleTree]] = []
        self.epoch = 1
        self.layer = 1
        self.in_group = 0
        self.current = self._new_oracles()
        bins = sum(config.J**j for j in range(1, config.d + 1))
        self.bin_delta = config.failure_prob / (MAX_EPOCHS * config.K * bins
                                                * INEQUALITIES_PER_BIN)

    def _make_randomizer(self) -> LPLRRandomizer:
        c = self.config
        return LPLRRandomizer(c.d, c.epsilon, c.count_share, c.vector_share, c.matrix_noise)

    def _initial_beta(self) -> float:
        return 0.0

    def _new_oracles(self) -> list[OracleTree]:
        c = self.config
        return [OracleTree(c.d, c.J, c.L, c.S) for _ in range(c.K)]

    # --- schedule ------------------------------------------------------------------------------
    def group_size(self, epoch: int | None = None) -> int:
        """n_m = ⌈τ_1 2^{m−1} / d⌉ users per layer group of epoch m."""
        m = self.epoch if epoch is None else epoch
        return math.ceil(self.config.first_epoch * 2 ** (m - 1) / self.config.d)

    def window(self) -> int:
        """Users left in the current layer group (the broadcast tree is fixed until then)."""
        return self.group_size() - self.in_group

    # --- the device's side ---------------------------------------------------------------------
    def active_sets(self, X: np.ndarray) -> np.ndarray:
        """Boolean (n, K): a ∈ A_m(x) for each user's arms X (n, K, d), Alg. 1 line 8 chained
        over the finished epochs; nested by construction (A_{m+1}(x) ⊆ A_m(x))."""
        n, K, _ = X.shape
        mask = np.ones((n, K), dtype=bool)
        scale = self.config.confidence_scale
        for oracles in self.finished:
            pred = np.empty((n, K))
            width = np.empty((n, K))
            for a, tree in enumerate(oracles):
                pred[:, a], width[:, a] = tree.predict(X[:, a, :])
            width *= scale
            lcb = np.where(mask, pred - width, -np.inf).max(axis=1)
            mask &= pred + width >= lcb[:, None]
        return mask

    def decide(self, X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """a_t uniform over A_m(x_t) (device randomness)."""
        return self.choose(self.active_sets(X), rng)

    def propensity(self, X: np.ndarray, a: np.ndarray) -> np.ndarray:
        """P(a_i | x_i) = 1 / |A_m(x_i)| for an arm a_i of the active set (0 outside it): the
        device draws uniformly from A_m(x) (Alg. 1 line 5)."""
        mask = self.active_sets(X)
        rows = np.arange(mask.shape[0])
        return np.where(mask[rows, a], 1.0 / mask.sum(axis=1), 0.0)

    @staticmethod
    def choose(mask: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One uniformly random True column per row of ``mask`` (n, K)."""
        counts = mask.sum(axis=1)
        pick = np.floor(rng.random(mask.shape[0]) * counts).astype(np.int64)
        order = np.cumsum(mask, axis=1) - 1
        return np.argmax(mask & (order == pick[:, None]), axis=1)

    def blocks(self) -> tuple[list[np.ndarray], np.ndarray]:
        """The broadcast layout of the current layer: per action its pending node ids, and the
        block offset of each action (block = offset[a] + position of the node)."""
        nodes = [tree.pending(self.layer) for tree in self.current]
        sizes = np.array([len(x) for x in nodes])
        return nodes, np.concatenate([[0], np.cumsum(sizes)])

    def encode(self, phi: np.ndarray, y: np.ndarray, a: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """What each user's device feeds its randomizer at the current layer: block index (−1:
        none), normalised u = φ^(j)/ρ and z = y^(j) φ^(j)/(ρ Y); and the number of blocks."""
        nodes, offset = self.blocks()
        Y = self.config.residual_bound
        n, d = phi.shape
        block = -np.ones(n, dtype=np.int64)
        u = np.zeros((n, d))
        z = np.zeros((n, d))
        for act, tree in enumerate(self.current):
            rows = np.flatnonzero(a == act)
            if rows.size == 0:
                continue
            route = tree.route(phi[rows], y[rows], self.layer)
            pos = -np.ones(tree.size, dtype=np.int64)
            pos[nodes[act]] = np.arange(len(nodes[act]))
            hit = route.node >= 0
            rows, node = rows[hit], route.node[hit]
            rho = tree.rho[node]
            block[rows] = offset[act] + pos[node]
            u[rows] = route.phi[hit] / rho[:, None]
            z[rows] = (route.y[hit] / (rho * Y))[:, None] * route.phi[hit]  # type: ignore[index]  # routed with its y
        # Rounding can leave a norm a hair above its bin's bound: project back (≤ 1e-12).
        for arr in (u, z):
            norms = np.linalg.norm(arr, axis=1)
            arr /= np.maximum(norms, 1.0)[:, None]
        return block, u, z, int(offset[-1])

    # --- the analyzer's side -------------------------------------------------------------------
    def ingest(self, rows: np.ndarray) -> int:
        raise NotImplementedError("lplr ingests per-layer block sums (ingest_blocks); it runs "
                                  "in shared.core.lplr_simulator")

    def ingest_blocks(self, sums: BlockSums) -> None:
        """One layer group's summed reports (n = its users): fit layer j of all K oracles."""
        if sums.n != self.group_size():
            raise ValueError(f"a layer group of epoch {self.epoch} has {self.group_size()} users")
        c = self.config
        sums = self.randomizer.debiased(sums)
        nodes, offset = self.blocks()
        for a, tree in enumerate(self.current):
            sl = slice(offset[a], offset[a + 1])
            part = BlockSums(sums.n, sums.counts[sl], sums.vectors[sl], sums.matrices[sl])
            tree.fit_layer(self.layer, nodes[a], part, self.randomizer, c.residual_bound,
                           c.activity_sigmas, self.bin_delta)
        self.reports += sums.n
        self.in_group = 0
        # One broadcast per layer group (the tree grows); counted as a model version.
        self.model = replace(self.model, version=self.model.version + 1, reports=self.reports)
        if self.layer < c.d:
            self.layer += 1
            return
        self.finished.append(self.current)
        self.current = self._new_oracles()
        self.epoch += 1
        self.layer = 1

    def consumed(self, n: int) -> None:
        """Count n users of the current group (their sums arrive with ``ingest_blocks``)."""
        if n > self.window():
            raise ValueError("more users than the group has left")
        self.in_group += n

    def ledger(self, T: int | None = None, aggregation: Aggregation = "reports",
               secure_sum: SecureSum | None = None) -> PrivacyLedger:
        from privbandit.shared.core.accounting.lplr import lplr_ledger

        return lplr_ledger(self.randomizer)

    def _extra_state(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "layer": self.layer}
