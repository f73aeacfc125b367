"""The device's refusals. Domain code (decide and feedback, the store) raises these;
``services.common.web`` turns each into ``{"code", "message"}`` with its status. A refused
request changes no state."""

from __future__ import annotations

from privbandit.services.common.errors import Conflict, Invalid, NotFound, TooMany, Unavailable


class WrongArms(Invalid, code="wrong_arms"):
    """``decide`` with another number of feature vectors than the task's K."""


class WrongDimension(Invalid, code="wrong_dimension"):
    """A feature vector whose length is not the task's d."""


class NotFinite(Invalid, code="not_finite"):
    pass


class FeatureNorm(Invalid, code="feature_norm"):
    """A feature vector with ||x|| > L (the bound every privacy calibration assumes)."""


class FeatureIntercept(Invalid, code="feature_intercept"):
    """A feature vector whose x[0] is not the task's intercept c (the centered encodings of
    ``ddp-linucb`` and ``ldp-linucb``: their sensitivity, and so their noise, assume x[0] = c for
    every context), or whose coordinates ``policy.intercept_coords`` do not sum to c
    (``ddp-linucb`` on per-arm features)."""


class InvalidReport(Invalid, code="invalid_report"):
    """The randomizer refused the (x, r) of a feedback."""


class UnknownDecision(NotFound, code="unknown_decision"):
    """No open decision with this id for this task (not issued by this device for this task,
    altered, or older than ``unused_decision_ttl``)."""


class DecisionUsed(Conflict, code="decision_used"):
    """Feedback for this decision was already recorded."""


class NoHpkeKey(Unavailable, code="no_hpke_key"):
    """Feedback for a ``reports`` task before the analyzer's HPKE key is known."""


class NoPaillierKey(Unavailable, code="no_paillier_key"):
    """Feedback for a Paillier task before the analyzer's Paillier key is known."""


class OutboxFull(TooMany, code="outbox_full"):
    """Feedback while the outbox holds ``limits.outbox_reports`` reports the shuffler has not
    accepted yet (429 with Retry-After): nothing was stored and the decision stays open."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message, headers={"Retry-After": str(retry_after)})


class MissingFeatures(Invalid, code="missing_features"):
    """``decide`` without features for a linear task."""


class UnexpectedFeatures(Invalid, code="unexpected_features"):
    """``decide`` with features for a multi-armed task (it has none: send ``{}``)."""


class RewardOutOfRange(Invalid, code="reward_out_of_range"):
    """A reward outside [0, 1] for a task whose rewards are bounded."""


class EpsilonOutOfRange(Invalid, code="epsilon_out_of_range"):
    """A privacy level ε_t outside the task's allowed range."""


class UnexpectedEpsilon(Invalid, code="unexpected_epsilon"):
    """A privacy level ε_t for a task without per-user levels."""


class MissingReward(Invalid, code="missing_reward"):
    """Feedback without a reward for a bandit (linear or multi-armed) task."""


class UnexpectedLosses(Invalid, code="unexpected_losses"):
    """Feedback with ``losses`` for a bandit task (they are for BCO tasks)."""


class MissingLosses(Invalid, code="missing_losses"):
    """Feedback without ``losses`` (or with a reward) for a BCO task."""


class WrongLossCount(Invalid, code="wrong_loss_count"):
    """A BCO feedback whose number of losses is not the number of points played."""


class LossOutOfRange(Invalid, code="loss_out_of_range"):
    """A BCO loss outside the task's [0, B]."""


class MissingUser(Invalid, code="missing_user"):
    """Feedback without a user key for a task that bounds each person's reports."""
