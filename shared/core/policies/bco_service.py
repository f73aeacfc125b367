"""BCO policies behind the services' ``Policy`` interface (issue 12, item 3): one user per
report, applied in arrival order (pass-through, l = 1), a new model published after each.

The learners are those of ``shared.core.policies.bco`` (one run, the same step sizes, δ, ρ and σ;
the same compiled kernels), fed row by row:

- one point (``bco``, ``ldp-bco``; Saha–Tewari / Hazan–Levy Alg. 1 around Zheng Alg. 1): a row
  ``[v, u, f̃]`` from a device that played x = y_v + δ A_v u, A_v = (∇²ℛ(y_v) + λ_v I)^{-1/2}, gives
  g = (d/δ) f̃ A_v^{-1} u (``bco_kernels.one_point_gradient``), rebuilt from version v's own y_v
  and λ_v (a device may hold an older model than the latest); then c += g − μ y_v and
  y ← argmin_x η cᵀx + (ημ(t+1)/2)‖x‖² + ℛ(x) (``ftrl_ball``), as the simulator's loop.
- two points (``bco2``, ``ldp-bco2``; Agarwal–Dekel–Xiao, Zheng Alg. 4 around Alg. 2): a row
  ``[v, u, Δ̃]`` gives g = (d/(2ρ)) Δ̃ u, y ← Π_{(1−ξ)K}(y − η_t g), η_t = η₀ or η₀/(μ(t+1)).

The analyzer keeps (y_v, λ_v) of the versions a report may still be played from. Reports arrive
in the order they were formed (the device's outbox and the shuffler are FIFO; pass-through
batches are delivered oldest first, a few in flight at once), and a report can only be played
from a version published before it was formed. So until a report
played from v or from a newer version arrives (v is *reached*), every report that arrives may
have been formed before any device held v: such reports say nothing about v, and v does not age.
After an outage the shuffler's backlog may hold hundreds of reports all played from the one
version the devices had, while the devices already play the version they fetched when the
analyzer came back, published at the start of the drain: its first report arrives only after
the whole backlog, however long. Once reached, a version goes when ``VERSION_HISTORY`` reports
have arrived without one played from it (it stays while its reports keep arriving). The history
therefore holds the last ``VERSION_HISTORY`` reports' worth of reached versions plus the
versions published since the newest reached one (during a drain, one per backlog report).

A report for a version no longer kept (or never published) is refused at decode (``admit_row``,
counted as rejected); one that passed decode but fell out while its group was fed is skipped
(``skipped``).
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from privbandit.shared.core.accounting.ledger import Aggregation, PrivacyLedger, SecureSum
from privbandit.shared.core.policies.base import Policy
from privbandit.shared.core.policies.bco import BCOPolicy, OnePointBCO, TwoPointBCO, kernels
from privbandit.shared.core.policies.bco_config import BCOConfig, LDPBCO2Config, LDPBCOConfig
from privbandit.shared.core.policies.bco_model import BCOModel
from privbandit.shared.core.randomizers.bco import OnePointReport, TwoPointReport
from privbandit.shared.core.randomizers.bco_rows import BCORowRandomizer

VERSION_HISTORY = 256


def exploration_matrix(y: np.ndarray, R: float, lam: float) -> np.ndarray:
    """A = (∇²ℛ(y) + λI)^{-1/2} for ℛ(x) = −ln(R² − ‖x‖²), as a d×d matrix."""
    # The kernels are imported where they run, here and below: importing them imports numba
    # (~0.3 s of CPU), which a process whose tasks have no BCO policy — every shuffler, the
    # command line, a service of another config — must not pay at start-up.
    from privbandit.shared.core.policies.bco_kernels import barrier_eigs

    a, b, n2 = barrier_eigs(y, R, lam)
    d = y.shape[0]
    A = np.empty((d, d))
    col = np.empty(d)
    for j in range(d):
        e = np.zeros(d)
        e[j] = 1.0
        kernels().ellipsoid_apply(y, e, a, b, n2, -0.5, col)
        A[:, j] = col
    return A


class BCOServicePolicy(Policy[BCOConfig, BCORowRandomizer]):
    """Base of the four BCO task policies; ``inner`` holds the simulator's parameters."""

    model: BCOModel
    inner_class: ClassVar[type[OnePointBCO] | type[TwoPointBCO]]

    def __init__(self, config: BCOConfig, rng: np.random.Generator | None = None) -> None:
        self.inner = self.inner_class(config, runs=1)
        self.y = np.zeros(config.d)
        # version → (y_v, λ_v): what a device holding version v played around
        self.history: dict[int, tuple[np.ndarray, float]] = {}
        # version → the report count when it was last published, reached or reported on
        self.touched: dict[int, int] = {}
        # (report count, version) of every touch, oldest first (the counts never decrease): what
        # may age out is at the front; an entry whose version was touched again since is stale
        self._aging: deque[tuple[int, int]] = deque()
        # the newest version a report has been played from (−1: none yet); versions above it
        # do not age (module doc)
        self.reached = -1
        super().__init__(config, rng)

    @property
    def points_per_user(self) -> int:
        return self.inner.points_per_user

    def _make_randomizer(self) -> BCORowRandomizer:
        return self._randomizer(self.config, lambda: self.inner)

    @classmethod
    def randomizer_of(cls, config: BCOConfig) -> BCORowRandomizer:
        # Without the initial model: its exploration matrix runs the numba kernels, whose
        # import and start-up (~0.3 s of CPU) the shuffler and the device would pay at every
        # start only to learn a row's width; and the inner policy only once σ is needed (a
        # one-point policy's step sizes need σ, whose analytic calibration imports scipy).
        return cls._randomizer(config, functools.cache(lambda: cls.inner_class(config, runs=1)))

    @classmethod
    def _randomizer(cls, c: BCOConfig, inner: Callable[[], OnePointBCO | TwoPointBCO]
                    ) -> BCORowRandomizer:
        points = cls.inner_class.points_per_user
        report: OnePointReport | TwoPointReport | None = None
        if BCOPolicy.is_private(c):
            # (as ``BCOPolicy.privacy``: mypy deems BCOConfig & PrivateBCO impossible)
            assert isinstance(c, LDPBCOConfig | LDPBCO2Config), "a private BCO config"
            eps, delta, cal = c.epsilon, c.delta, c.calibration
            report = (OnePointReport(eps, delta, c.loss_bound, cal) if points == 1
                      else TwoPointReport(eps, delta, c.lipschitz, cal))
        # ρ is a two-point policy's (which needs no σ to be made)
        rho = getattr(inner(), "rho", 0.0) if points == 2 else 0.0
        return BCORowRandomizer(c.d, points, loss_bound=c.loss_bound, lipschitz=c.lipschitz,
                                rho=rho, sigma=lambda: inner().sigma, report=report)

    def window(self) -> int:
        return 1

    def _lam(self, t: int) -> float:
        """λ of the ellipsoid serving user t (0-based): ημ(t + 1) (Hazan–Levy); 0 when μ = 0."""
        return 0.0

    def _touch(self, version: int, count: int) -> None:
        self.touched[version] = count
        self._aging.append((count, version))

    def _model_at(self, version: int) -> BCOModel:
        self.history[version] = (self.y.copy(), self._lam(self.reports))
        self._touch(version, self.reports)
        horizon = self.reports - VERSION_HISTORY
        while self._aging and self._aging[0][0] <= horizon:
            count, v = self._aging.popleft()
            # An unreached version stays (it is touched, so queued again, when reached).
            if self.touched.get(v) == count and v <= self.reached:
                del self.history[v], self.touched[v]
        return self._build_model(version)

    def _build_model(self, version: int) -> BCOModel:
        raise NotImplementedError

    def _initial_model(self) -> BCOModel:
        return self._model_at(0)

    def _model_from_dict(self, data: dict[str, Any]) -> BCOModel:
        return BCOModel.from_dict(data)

    def admit_row(self, row: np.ndarray) -> None:
        """Refuse a report for a version this analyzer never published or no longer keeps."""
        v = int(row[0])
        if v not in self.history:
            raise ValueError(f"model version {v} is not one of the {len(self.history)} kept "
                             f"(latest {self.model.version})")

    def ingest(self, rows: np.ndarray) -> int:
        """Consume the first row: one gradient step, one new model; returns 1."""
        rows = np.atleast_2d(np.asarray(rows, dtype=float))
        if rows.shape[0] < 1:
            raise ValueError("ingest needs at least one report row")
        row = self.randomizer.check_row(rows[0])
        v = int(row[0])
        if v not in self.history:
            self.skipped += 1  # fell out of the history after decode
            return 1
        if v > self.reached:
            # The first report played from v or newer: what arrives from now on was formed after
            # the devices held v, so the versions up to v begin to age now.
            for u in range(self.reached + 1, v):
                if u in self.touched:
                    self._touch(u, self.reports + 1)
            self.reached = v
        self._touch(v, self.reports + 1)  # reported on: kept while its reports arrive
        self._step(v, row[1:-1], float(row[-1]))
        self.reports += 1
        self.model = self._model_at(self.model.version + 1)
        return 1

    def _step(self, version: int, u: np.ndarray, value: float) -> None:
        raise NotImplementedError

    def ledger(self, T: int | None = None, aggregation: Aggregation = "reports",
               secure_sum: SecureSum | None = None) -> PrivacyLedger:
        return self.inner.ledger()

    def _extra_state(self) -> dict[str, Any]:
        return {"y": self.y.tolist(),
                "history": [[v, y.tolist(), lam, self.touched[v]]
                            for v, (y, lam) in self.history.items()],
                "reached": self.reached}

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        self.y = np.asarray(state["y"], dtype=float)
        self.history = {int(v): (np.asarray(y, dtype=float), float(lam))
                        for v, y, lam, _ in state["history"]}
        self.touched = {int(v): int(t) for v, _, _, t in state["history"]}
        self._aging = deque(sorted((t, v) for v, t in self.touched.items()))
        # States saved before ``reached`` existed: none reached, so nothing ages until the next
        # report (keeps more than needed for a while, never refuses what a device still plays).
        self.reached = int(state.get("reached", -1))


class OnePointService(BCOServicePolicy):
    """``bco`` / ``ldp-bco`` in the services (module doc)."""

    inner_class = OnePointBCO
    inner: OnePointBCO

    def __init__(self, config: BCOConfig, rng: np.random.Generator | None = None) -> None:
        self.c = np.zeros(config.d)  # Σ_τ (g_τ − μ y_τ)
        super().__init__(config, rng)

    def _lam(self, t: int) -> float:
        return self.inner.eta * self.config.strong_convexity * (t + 1)

    def _build_model(self, version: int) -> BCOModel:
        R = self.config.radius
        y, lam = self.history[version]
        return BCOModel(version=version, reports=self.reports, y=y.copy(), radius=R,
                        A=exploration_matrix(y, R, lam), delta=self.inner.delta)

    def _step(self, version: int, u: np.ndarray, value: float) -> None:

        c, inner = self.config, self.inner
        y_v, lam_v = self.history[version]
        x, g = np.empty(c.d), np.empty(c.d)
        kernels().one_point_gradient(y_v, u, value, c.radius, lam_v, inner.delta, x, g)
        self.c += g - c.strong_convexity * y_v
        t = self.reports
        kernels().ftrl_ball(self.c, inner.eta, inner.eta * c.strong_convexity * (t + 1), c.radius,
                            self.y)

    def _extra_state(self) -> dict[str, Any]:
        return {**super()._extra_state(), "c": self.c.tolist()}

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        super()._load_extra_state(state)
        self.c = np.asarray(state["c"], dtype=float)


class TwoPointService(BCOServicePolicy):
    """``bco2`` / ``ldp-bco2`` in the services (module doc)."""

    inner_class = TwoPointBCO
    inner: TwoPointBCO

    def _build_model(self, version: int) -> BCOModel:
        return BCOModel(version=version, reports=self.reports, y=self.y.copy(),
                        radius=self.config.radius, rho=self.inner.rho)

    def _step(self, version: int, u: np.ndarray, value: float) -> None:

        c, inner = self.config, self.inner
        g = np.empty(c.d)
        kernels().two_point_gradient(value, u, inner.rho, g)
        mu = c.strong_convexity
        eta = inner.eta0 if mu == 0.0 else inner.eta0 / (mu * (self.reports + 1))
        self.y -= eta * g
        norm = float(np.linalg.norm(self.y))
        if norm > inner.shrink:
            self.y *= inner.shrink / norm


class BCO(OnePointService, algo="bco", threat_model="none"):
    """One-point BCO, non-private."""


class LDPBCO(OnePointService, algo="ldp-bco", threat_model="ldp"):
    """One-point BCO, noisy report rows under the ldp threat model."""


class BCO2(TwoPointService, algo="bco2", threat_model="none"):
    """Two-point BCO, non-private."""


class LDPBCO2(TwoPointService, algo="ldp-bco2", threat_model="ldp"):
    """Two-point BCO, noisy report rows under the ldp threat model."""
