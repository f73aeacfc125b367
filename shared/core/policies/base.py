"""One policy interface for the simulator and the services.

A policy lives on the analyzer. It owns the device-side ``randomizer`` the task uses, ingests
report rows (or, for secure summation, a batch statistic), decides when to publish a new
``Model``, and states its privacy ledger. The device only ever needs the published model.

    window()                 how many upcoming reports the current model may serve before the
                             policy might publish (the simulator's vectorisation unit)
    ingest(rows) -> k        consume the first k ≥ 1 rows; at most one model is published, after
                             row k. Services loop until all rows are consumed; the simulator
                             re-decides the unconsumed users with the new model.

A policy that takes the ``secure-sum`` transport also has

    ingest_statistic(s, n)   one shuffled batch given only its sum (``SumIngesting``; the
                             registry refuses a secure-sum entry whose class lacks it)

The linear policies' published model (θ̃, V, β) and its defaults are ``policies.linear``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Generic, Protocol, TypeVar, runtime_checkable

import numpy as np

from privbandit.shared.core.accounting.ledger import Aggregation, PrivacyLedger, SecureSum

# A policy's config and randomizer classes: ``class SBLB(NoisyStatisticsPolicy[SBLBConfig,
# BinaryRandomizer])`` types its ``config`` and ``randomizer`` attributes.
ConfigT = TypeVar("ConfigT")
# Unbounded: a policy's randomizer is whatever its family's devices run (linear statistics, arm
# rows, BCO rows, LPLR blocks); the families that need the linear ``Randomizer`` bound it there.
RandomizerT = TypeVar("RandomizerT")


class PublishedModel(Protocol):
    """What every published model has: its version (the ETag of spec §4) and a JSON form for
    the analyzer's store. The model classes are the families' (``policies.families``)."""

    @property
    def version(self) -> int: ...

    def to_dict(self) -> dict[str, Any]: ...


@runtime_checkable
class SumIngesting(Protocol):
    """A policy that can learn from batch sums alone (the ``secure-sum`` transport)."""

    def ingest_statistic(self, stat: np.ndarray, n: int) -> None: ...


@runtime_checkable
class Scheduled(Protocol):
    """A policy that sizes its noise per batch length (``ScheduledBatchPolicy``: ``sblb``'s
    ε0(l), ``ddp-linucb``'s shares): under a growing batch schedule the device randomizes for
    the announced length and the analyzer checks each batch against its own length's
    randomizer. The registry's ``scheduled`` flag says which entries the services run so."""

    def randomizer_for(self, size: int) -> Any: ...


@runtime_checkable
class RowAdmitting(Protocol):
    """A policy that refuses some well-formed report rows before a batch is ingested (a row
    naming a model version or phase it cannot have been made under): ``admit_row`` raises
    ``ValueError`` for such a row."""

    def admit_row(self, row: np.ndarray) -> None: ...


@runtime_checkable
class Eps0Scheduled(Protocol):
    """A policy whose reports' ε0 depends on the length of the batch they land in (``sblb``
    under a growing schedule: the largest ε0 whose batch of that length meets the central
    target)."""

    config: Any
    schedule: Any  # a ``core.schedule.BatchSchedule``

    def eps0_for(self, size: int) -> float: ...


# Capabilities of published models (the simulator's log, off-policy evaluation, exploration).


@runtime_checkable
class Distributional(Protocol):
    """A model that states the whole law π(· | X) it draws arms from (a stochastic logging
    policy: ``(n, K)`` probabilities)."""

    def distribution(self, X: np.ndarray) -> np.ndarray: ...


@runtime_checkable
class WithPropensity(Protocol):
    """A model that states π(a_i | X_i) of the arms it chose (1 for a deterministic argmax)."""

    def propensity(self, X: np.ndarray, a: np.ndarray) -> np.ndarray: ...


@runtime_checkable
class Scoring(Protocol):
    """A model with a score per arm (what softmax exploration turns into probabilities)."""

    def scores(self, X: np.ndarray) -> np.ndarray: ...


@runtime_checkable
class Ellipsoid(Protocol):
    """A model with a confidence ellipsoid {θ : (θ̃ − θ)ᵀ V (θ̃ − θ) ≤ β²} (the linear family's
    ``Model``)."""

    V: np.ndarray
    theta: np.ndarray
    beta: float


class Policy(ABC, Generic[ConfigT, RandomizerT]):
    algo: ClassVar[str]
    threat_model: ClassVar[str]
    config: ConfigT
    randomizer: RandomizerT
    model: PublishedModel

    def __init_subclass__(cls, *, algo: str | None = None, threat_model: str | None = None,
                          **kwargs: Any) -> None:
        """``class BCO(OnePointService, algo="bco", threat_model="none")``: a variant that
        differs from its base only by its id and threat model is one line."""
        super().__init_subclass__(**kwargs)
        if algo is not None:
            cls.algo = algo
        if threat_model is not None:
            cls.threat_model = threat_model

    def __init__(self, config: ConfigT, rng: np.random.Generator | None = None) -> None:
        self.config = config
        self.rng = rng if rng is not None else np.random.default_rng()
        self.randomizer = self._make_randomizer()
        self.reports = 0
        self.repairs = 0
        # Updates skipped because a statistic or a solve was unusable (see NoisyStatisticsPolicy).
        self.skipped = 0
        self.model = self._initial_model()

    @abstractmethod
    def _make_randomizer(self) -> RandomizerT: ...

    @classmethod
    def randomizer_of(cls, config: ConfigT) -> RandomizerT:
        """The device-side randomizer of a policy of ``config``, without its analyzer state
        (``registry.randomizer_for``): the built policy's, unless a family whose initial model
        is costly to build makes it directly (``BCOServicePolicy``)."""
        return cls(config).randomizer

    @abstractmethod
    def window(self) -> int: ...

    @abstractmethod
    def ingest(self, rows: np.ndarray) -> int: ...

    @abstractmethod
    def ledger(self, T: int | None = None, aggregation: Aggregation = "reports",
               secure_sum: SecureSum | None = None) -> PrivacyLedger:
        """The privacy ledger; ``aggregation`` says what an observer of the shuffler output sees
        (whole reports, or only batch sums under secure summation)."""

    def bind_arms(self, arms: np.ndarray | None) -> None:
        """The fixed (K, d) arm set every user sees, or None (contextual arms). Only policies
        over a fixed arm set (phased elimination) use it; the others ignore it."""
        return None

    @property
    def batch_size(self) -> int:
        """Shuffler batch length l this policy expects (1 = pass-through)."""
        return 1

    @abstractmethod
    def _initial_model(self) -> PublishedModel:
        """Version 0 of the published model."""

    @abstractmethod
    def _model_from_dict(self, data: dict[str, Any]) -> PublishedModel:
        """A model from its ``to_dict`` form (the analyzer's store)."""

    # State for the analyzer's store: plain JSON-able data, restored exactly.
    def get_state(self) -> dict[str, Any]:
        return {
            "reports": self.reports,
            "repairs": self.repairs,
            "skipped": self.skipped,
            "model": self.model.to_dict(),
            **self._extra_state(),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self.reports = int(state["reports"])
        self.repairs = int(state["repairs"])
        self.skipped = int(state.get("skipped", 0))  # absent from states saved before it existed
        self.model = self._model_from_dict(state["model"])
        self._load_extra_state(state)

    def _extra_state(self) -> dict[str, Any]:
        return {}

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        return None
