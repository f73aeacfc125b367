"""The multi-armed policies behind the shared ``Policy`` interface.

A multi-armed policy updates after every user (AdaR-UCB after every episode). For the services it
is an ordinary ``Policy``: ``ingest(rows)`` consumes report rows (``[arm, value]`` or
``[arm, ε_t, value]``, see ``shared.core.randomizers.arms``) and publishes an ``ArmModel``;
``window()`` says how many users the current model may serve before the next publication.

For the simulator there is a fast path with the same semantics: ``play(values, eps, u)`` runs the
sequential loop "decide from the current model → the user reports → ingest → publish" for a whole
window of users in one call, where ``values[i, a]`` is the report value user i would send if she
pulled arm a (drawn by the same device randomizer for all arms at once), ``eps[i]`` her privacy
level and ``u[i]`` her device's uniform for sampling policies. Tests check that ``play`` and the
row-by-row ``ingest`` path make identical decisions and reach identical states.

Counters for the ledger: ``used`` (responses the algorithm learned from; the paper's p0 is
used / reports) and ``declined`` (users with ε_t = 0).
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, TypeVar

import numpy as np

from privbandit.shared.core.accounting.ledger import Aggregation, PrivacyLedger, SecureSum
from privbandit.shared.core.policies.arm_model import ArmModel
from privbandit.shared.core.policies.base import Policy
from privbandit.shared.core.policies.mab_config import MABConfig
from privbandit.shared.core.randomizers.arms import ArmRandomizer

MABConfigT = TypeVar("MABConfigT", bound=MABConfig)
ArmRandomizerT = TypeVar("ArmRandomizerT", bound=ArmRandomizer)


class MABPolicy(Policy[MABConfigT, ArmRandomizerT]):
    """Base of ``ucb``, ``heldp-ucb-l``, ``heldp-ucb-b``, ``ldp-mab`` and ``adar-ucb``."""

    model: ArmModel

    def __init__(self, config: MABConfigT, rng: np.random.Generator | None = None) -> None:
        self.used = 0
        self.declined = 0
        super().__init__(config, rng)

    @property
    def K(self) -> int:
        return int(self.config.K)

    def _initial_model(self) -> ArmModel:
        return ArmModel(version=0, reports=0, indices=np.full(self.K, np.inf))

    def _model_from_dict(self, data: dict[str, Any]) -> ArmModel:
        return ArmModel.from_dict(data)

    def window(self) -> int:
        return 1

    # -- the services' path: one report at a time ---------------------------------------------
    def ingest(self, rows: np.ndarray) -> int:
        """Consume the first report row, publish the model that follows it; returns 1."""
        rows = np.atleast_2d(np.asarray(rows, dtype=float))
        if rows.shape[0] < 1:
            raise ValueError("ingest needs at least one report row")
        row = self.randomizer.check_row(rows[0])
        self.admit_row(row)
        arm = int(row[0])
        eps = np.array([row[1]]) if self.randomizer.per_user_epsilon else None
        col = self.randomizer.probability_column
        self._count(eps, 1)
        self._observe(arm, row[-1], eps, None if col is None else float(row[col]))
        self.reports += 1
        self._publish_current()
        return 1

    def admit_row(self, row: np.ndarray) -> None:
        """Refuse (ValueError) a row the randomizer accepts but no device holding one of this
        policy's published models could send; nothing by default."""

    @abstractmethod
    def _observe(self, arm: int, value: float, eps: np.ndarray | None,
                 prob: float | None = None) -> None:
        """Learn from one report of ``arm`` (its value, the user's level if any, and the
        probability the device's model gave the arm if the rows carry it)."""

    @abstractmethod
    def _current_model(self, version: int) -> ArmModel:
        """The model the current state defines."""

    def _publish_current(self) -> None:
        self.model = self._current_model(self.model.version + 1)

    # -- the simulator's fast path -------------------------------------------------------------
    def play(self, values: np.ndarray, eps: np.ndarray | None, u: np.ndarray) -> np.ndarray:
        """Serve len(u) users in order: decide, observe ``values[i, arm]``, update, publish.

        Returns the arms chosen. Equivalent to calling ``model.decide(u[i])`` and ``ingest`` on
        the row ``[arm, (eps[i],) values[i, arm]]`` for each user i.
        """
        n = int(np.asarray(u).shape[0])
        values = np.asarray(values, dtype=float)
        if values.shape != (n, self.K):
            raise ValueError(f"values must have shape ({n}, {self.K})")
        self._count(eps, n)
        arms, published = self._play(values, eps, np.asarray(u, dtype=float))
        self.reports += n
        if published:
            self.model = self._current_model(self.model.version + published)
        return arms

    @abstractmethod
    def _play(self, values: np.ndarray, eps: np.ndarray | None, u: np.ndarray
              ) -> tuple[np.ndarray, int]:
        """The sequential loop; returns the arms and how many models it published."""

    def _count(self, eps: np.ndarray | None, n: int) -> None:
        """Ledger counters for n reports with levels eps (None: every report used)."""
        if eps is None:
            self.used += n
            return
        self.declined += int(np.count_nonzero(np.asarray(eps) == 0))
        self.used += int(np.count_nonzero(self._usable(np.asarray(eps))))

    def _usable(self, eps: np.ndarray) -> np.ndarray:
        return np.ones(eps.shape, dtype=bool)

    # -- ledger and state ---------------------------------------------------------------------
    @abstractmethod
    def ledger(self, T: int | None = None, aggregation: Aggregation = "reports",
               secure_sum: SecureSum | None = None) -> PrivacyLedger: ...

    def get_state(self) -> dict[str, Any]:
        return {**super().get_state(), "used": self.used, "declined": self.declined}

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self.used = int(state["used"])
        self.declined = int(state["declined"])
