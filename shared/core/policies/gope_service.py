"""AdaR-GOPE (Azize & Basu Alg. 3) through the services (issue 9): the task's own fixed arms,
the device's arm drawn from the phase's design, reports ``[arm, phase, reward]``.

Arms. A task defines its K fixed arms by ``arm_seed`` (``seeded_arms``: ``fixed-linear``'s
construction x_a = (1/√2)(1, v_a), v_a uniform on the unit sphere of R^{d−1}), so the analyzer,
every device and any client rebuild the same (K, d) matrix from the public task parameters.

Phase ℓ. The analyzer publishes (``PhaseModelMessage``) the phase id ℓ, the active arms A_ℓ, the
design's support and weights π_ℓ and the planned counts T_ℓ(a) = ⌈π_ℓ(a) c_ℓ⌉ (Eq. 8). A device
draws its arm a ~ π_ℓ with its own uniform (``PhaseModel.sample``), so the counts T_ℓ(a) hold in
expectation only: the analyzer ends the phase after Σ_a T_ℓ(a) counted reports and estimates with
the realised V_ℓ = Σ_t A_t A_tᵀ (pseudo-inverse if an arm was never drawn), i.e. Theorem 15's
width for the V_ℓ it has rather than Corollary 16's for the planned one.

Reports. ``[a, ℓ', r]``: arm index, the phase of the model the device drew from, the reward in
[0, 1] (``PhaseRowRandomizer``; raw, as in every ``central`` task: the trusted analyzer adds the
noise). Privacy needs every counted reward to lie in a per-arm sum that gets noise (the noise is
added on Supp π_ℓ only), so the analyzer counts a report into the current phase ℓ only when ℓ' ≤ ℓ
and a ∈ Supp π_ℓ (⊆ A_ℓ): a report naming a phase not yet published, or an arm outside the
current support (eliminated, or never in a design) is refused at decode (``admit_row``); one that
passed decode but whose arm left the support when the phase ended within its group is consumed
without being counted (``dropped``). A late report (ℓ' < ℓ) whose arm is still in the support is
counted into phase ℓ: its reward enters one phase's noisy sums, like every other (``late``).
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from privbandit.shared.core.environments.linear import biased_features, unit_directions
from privbandit.shared.core.policies.adar_gope import AdaRGOPE, PhaseModel
from privbandit.shared.core.policies.config import AdaRGOPEConfig
from privbandit.shared.core.randomizers.base import unpack_row

MAX_PHASE = 2**32 - 1


def seeded_arms(K: int, d: int, seed: int) -> np.ndarray:
    """The (K, d) fixed arms of a task: x_a = (1/√2)(1, v_a), v_a uniform on the unit sphere of
    R^{d−1}, drawn by ``numpy.random.default_rng(seed)`` (‖x_a‖ = 1)."""
    if d < 2:
        raise ValueError("adar-gope's seeded arms need d >= 2 (one bias coordinate)")
    return biased_features(unit_directions(np.random.default_rng(seed), (K, d - 1)))


class PhaseRowRandomizer:
    """Row layout and wire form of an AdaR-GOPE report ``[arm, phase, reward]`` (raw: central).
    Wire form (little-endian): arm and phase as uint32, the reward as float64."""

    exact = True
    _format = "<IId"

    def __init__(self, K: int, d: int, L: float = 1.0) -> None:
        self.K, self.d, self.L = int(K), int(d), float(L)

    @property
    def width(self) -> int:
        return 3

    def row(self, arm: int, phase: int, reward: float) -> np.ndarray:
        return np.array([float(arm), float(phase), float(reward)])

    def check_row(self, row: np.ndarray) -> np.ndarray:
        """Validate one row (raises ValueError): an arm index in [0, K), a phase ≥ 1, a reward
        in [0, 1]."""
        row = np.asarray(row, dtype=float)
        if row.shape != (3,) or not np.isfinite(row).all():
            raise ValueError("a report is 3 finite numbers")
        arm, phase, reward = row
        if arm != int(arm) or not 0 <= arm < self.K:
            raise ValueError(f"arm index must be an integer in [0, {self.K})")
        if phase != int(phase) or not 1 <= phase <= MAX_PHASE:
            raise ValueError("the phase must be an integer >= 1")
        if not 0.0 <= reward <= 1.0:
            raise ValueError("rewards lie in [0, 1]")
        return row

    def to_bytes(self, row: np.ndarray) -> bytes:
        row = np.asarray(row, dtype=float)
        if row.shape != (3,) or not np.isfinite(row).all():
            raise ValueError("a report is 3 finite numbers")
        return struct.pack(self._format, int(row[0]), int(row[1]), float(row[2]))

    def from_bytes(self, data: bytes) -> np.ndarray:
        return self.check_row(unpack_row(self._format, data))


class AdaRGOPEService(AdaRGOPE):
    """``adar-gope`` in the services (module doc): arms from the task, rows ``[a, ℓ', r]``."""

    randomizer: PhaseRowRandomizer  # type: ignore[assignment]  # phase rows, not linear ones

    def __init__(self, config: AdaRGOPEConfig, rng: np.random.Generator | None = None) -> None:
        if config.K is None or config.arm_seed is None:
            raise ValueError("adar-gope in the services needs K and arm_seed (its fixed arms)")
        self.late = 0
        self.dropped = 0
        super().__init__(config, rng)
        self.bind_arms(seeded_arms(config.K, config.d, config.arm_seed))

    def _make_randomizer(self) -> PhaseRowRandomizer:  # type: ignore[override]  # as above
        return self.randomizer_of(self.config)

    @classmethod
    def randomizer_of(  # type: ignore[override]  # phase rows, as above
        cls, config: AdaRGOPEConfig
    ) -> PhaseRowRandomizer:
        # Without the policy, whose first phase is a G-optimal design over its arms (scipy's
        # linalg, ≈ 0.6 s of start-up): the shuffler and the device need only the rows.
        assert config.K is not None
        return PhaseRowRandomizer(config.K, config.d, config.L)

    def window(self) -> int:
        return 1

    def admit_row(self, row: np.ndarray) -> None:
        """Refuse a report for a phase not yet published or an arm outside the current
        support (module doc)."""
        model = self.model
        assert isinstance(model, PhaseModel)
        arm, phase = int(row[0]), int(row[1])
        if phase > model.phase:
            raise ValueError(f"phase {phase} was never published (current {model.phase})")
        if arm not in set(model.support.tolist()):
            raise ValueError(f"arm {arm} is not in phase {model.phase}'s design support")

    def ingest(self, rows: np.ndarray) -> int:
        """Count rows into the current phase until it ends (then return how many were
        consumed: the next rows meet the next phase's support)."""
        rows = np.atleast_2d(np.asarray(rows, dtype=float))
        assert self.arms is not None
        for i, row in enumerate(rows):
            model = self.model
            assert isinstance(model, PhaseModel)
            arm, phase, reward = int(row[0]), int(row[1]), float(row[2])
            if arm not in set(model.support.tolist()) or phase > model.phase:
                self.dropped += 1
                continue
            x = self.arms[arm]
            self.V += np.outer(x, x)
            self.u += reward * x
            self.pos += 1
            self.reports += 1
            self.late += int(phase < model.phase)
            if self.pos >= model.length:
                self._end_phase(model)
                return i + 1
        return rows.shape[0]

    def _extra_state(self) -> dict[str, Any]:
        return {**super()._extra_state(), "late": self.late, "dropped": self.dropped}

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        super()._load_extra_state(state)
        self.late = int(state.get("late", 0))
        self.dropped = int(state.get("dropped", 0))
