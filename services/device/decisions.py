"""What the device does for its user: ``decide`` picks an arm with the cached model (no network
round trip) and seals the chosen arm's features into the decision id it answers
(``services.device.decision_ids``: nothing is written); ``give_feedback`` opens the id,
randomises (x, r) locally, encrypts it to the analyzer and queues it durably for the shuffler,
recording the decision as used in the same transaction. Multi-armed tasks
(``services.device.arms``) take no features: the device samples the arm itself and seals
``[arm, p]`` instead. Refusals are ``services.device.errors``; nothing changes state before
every check has passed."""

from __future__ import annotations

import time

import numpy as np

from privbandit.services.common.deps import lookup_task
from privbandit.services.device import persons
from privbandit.services.device.decision_ids import OpenDecision, short
from privbandit.services.device.errors import (
    DecisionUsed,
    FeatureIntercept,
    FeatureNorm,
    InvalidReport,
    MissingFeatures,
    NotFinite,
    OutboxFull,
    UnexpectedFeatures,
    UnknownDecision,
    WrongArms,
    WrongDimension,
)
from privbandit.services.device.families import Linear, handler
from privbandit.services.device.runtime import DeviceRuntime
from privbandit.services.device.store import PersonSlot
from privbandit.shared.core.exploration import Exploration
from privbandit.shared.core.policies.config import PolicyConfig
from privbandit.shared.core.randomizers.base import (
    intercept_rule,
    intercept_values,
    off_intercept,
)
from privbandit.shared.protocol.messages import DecideResponse, FeedbackResponse
from privbandit.shared.settings import TaskConfig

# How far in the future a decision's issue time may lie (the wall clock stepped back a little
# between decide and feedback, e.g. by NTP) before its id is refused.
CLOCK_SKEW = 60.0


def check_features(cfg: TaskConfig, features: list[list[float]]) -> np.ndarray:
    """The K×d feature matrix of a decide request, or the first reason it is refused.

    The common case (K rows of d finite numbers inside the ball ‖x‖ ≤ L) costs one array
    conversion and one row-wise ⟨x, x⟩; the per-row checks that name what is wrong run only
    when something is."""
    policy = cfg.policy
    if not isinstance(policy, PolicyConfig):  # the linear configs: the families with features
        raise UnexpectedFeatures(f"task {cfg.id} ({policy.algo}): decide takes no features")
    d, K, L = policy.d, cfg.K, policy.L
    if len(features) != K:
        raise WrongArms(f"task {cfg.id} has K = {K} arms, got {len(features)} rows")
    try:
        X = np.asarray(features, dtype=float)
    except ValueError:  # ragged rows: the loop below names the first one
        X = None
    if X is None or X.shape != (K, d):
        for i, row in enumerate(features):
            if len(row) != d:
                raise WrongDimension(f"task {cfg.id} has d = {d}; row {i} has {len(row)}")
        raise WrongDimension(f"task {cfg.id} needs {K} rows of d = {d} numbers")
    with np.errstate(over="ignore", invalid="ignore"):
        sq = np.einsum("ij,ij->i", X, X)  # ‖x‖² per row: NaN or inf if an entry is
        inside = sq <= (L * (1 + 1e-9)) ** 2
    if not inside.all():
        if not np.isfinite(X).all():  # the schema already forbids NaN/inf; keep numpy honest
            raise NotFinite("features must be finite numbers")
        bad = int(np.flatnonzero(~inside)[0])
        raise FeatureNorm(
            f"every feature vector must satisfy ||x|| <= L = {L}; row {bad} has "
            f"||x|| = {float(np.sqrt(sq[bad])):.6g}"
        )
    c = getattr(policy, "encoding_intercept", None)
    if c is not None:
        coords = tuple(getattr(policy, "intercept_coords", (0,)))
        values = intercept_values(X, coords)
        off = off_intercept(values, c)
        if off.any():
            bad = int(np.flatnonzero(off)[0])
            where = "x[0]" if coords == (0,) else f"the sum of x at {list(coords)}"
            raise FeatureIntercept(
                f"task {cfg.id} has the intercept {intercept_rule(c, coords)} in every feature "
                f"vector; row {bad} has {where} = {float(values[bad])!r}"
            )
    return X


async def decide(
    rt: DeviceRuntime, task: str, features: list[list[float]] | None
) -> DecideResponse:
    """Choose an arm for K per-arm feature vectors with the cached model (multi-armed tasks: no
    features; the arm is drawn from the cached arm model with the device's generator)."""
    started = time.perf_counter()
    cfg = lookup_task(rt.tasks, task, "device")
    model = rt.cache.model(task)
    family = handler(cfg)
    X = None
    if cfg.family.takes_features:
        if features is None:
            raise MissingFeatures(f"task {cfg.id} needs K = {cfg.K} feature vectors")
        X = check_features(cfg, features)
    elif features is not None:
        raise UnexpectedFeatures(f"task {cfg.id} {family.no_features} ({cfg.policy.algo}): "
                                 "decide takes no features")
    if cfg.exploration is not None and isinstance(family, Linear):
        assert X is not None  # the linear and GLB families take features
        decision = family.explore(model, X, rt.rng, Exploration.parse(cfg.exploration))
    else:
        decision = family.decide(model, X, rt.rng)
    state, action, points = decision.state, decision.action, decision.points
    # Durable without a write: the state is sealed in the id under the device's persisted key.
    decision_id = rt.decision_ids.issue(task, state)
    rt.metrics.decisions.labels(task).inc()
    rt.metrics.decide_seconds.observe(time.perf_counter() - started)
    return DecideResponse(decision_id=decision_id, action=action, model_version=model.version,
                          points=points, propensity=decision.propensity)


async def give_feedback(
    rt: DeviceRuntime, task: str, decision_id: str, reward: float | None,
    epsilon: float | None = None, losses: list[float] | None = None, user: str | None = None,
) -> FeedbackResponse:
    """Randomise, encrypt and queue the report of a decision; durable once this returns.

    A ``reports`` task seals the randomized report with HPKE; a ``paillier`` task encrypts only
    its coordinate counts under the analyzer's Paillier key (the shuffler will add them up) and
    seals their tag with HPKE. The keys come from the background fetchers: no network round trip
    happens here.

    Refused with 429 ``outbox_full`` before anything is read or stored when the outbox is full
    (``limits.outbox_reports``): the decision stays open for a retry."""
    cfg = lookup_task(rt.tasks, task, "device")
    randomizer = rt.randomizers[task]
    # The family's checks: a reward or losses, their range, a per-user level where the family
    # takes one (``services.device.families``).
    value, eps = handler(cfg).feedback(cfg, randomizer, reward, losses, epsilon)
    slot = persons.slot_for(cfg, rt.store.person_key, user)  # the person's bound (issue 24)
    limits = rt.settings.limits
    if not rt.store.reserve_outbox(limits.outbox_reports):
        raise OutboxFull(
            f"the outbox holds {rt.store.counters.outbox_pending} reports not yet accepted by "
            f"the shuffler (limit {limits.outbox_reports}); nothing was stored, the decision "
            f"stays open: retry the feedback later",
            limits.retry_after,
        )
    try:
        return await _give_feedback(rt, cfg, task, decision_id, value, eps, slot)
    finally:
        rt.store.release_outbox()


async def open_decision(rt: DeviceRuntime, task: str, decision_id: str) -> OpenDecision:
    """The decision ``decision_id`` names, if it opens for ``task``, was issued after the device's
    database was made (``DeviceStore.created``) and is younger than ``unused_decision_ttl``
    (``UnknownDecision`` otherwise; ``DecisionUsed`` for an expired one
    whose feedback was recorded, so a late retry still learns that its first attempt landed).

    Whether it was used is checked only when the report is queued (``complete_feedback``), in
    the same transaction, so the common path reads nothing from the store."""
    opened = rt.decision_ids.open(task, decision_id)
    if opened.issued < rt.store.created:
        # Its tombstone, if it was used, was in the database lost before this one was made.
        raise UnknownDecision(
            f"decision {short(decision_id)} for task {task} was issued before this device's "
            f"database was made (the earlier one was lost): whether it was used is unknown")
    age = time.time() - opened.issued
    if -CLOCK_SKEW <= age <= rt.settings.device_timing.unused_decision_ttl:
        return opened
    if await rt.store.decision_used(opened.uid):
        raise DecisionUsed("feedback for this decision was already given")
    when = "expired" if age > 0 else "issued in the future (the device's clock went back)"
    raise UnknownDecision(
        f"decision {short(decision_id)} for task {task} {when}: issued {age:.0f} s ago, open "
        f"for {rt.settings.device_timing.unused_decision_ttl:g} s")


async def _give_feedback(
    rt: DeviceRuntime, cfg: TaskConfig, task: str, decision_id: str,
    reward: float | list[float], eps: float | None, slot: PersonSlot | None = None,
) -> FeedbackResponse:
    """``reward``: the reward, or a BCO task's losses."""
    # The keys the task's transport encrypts under, as they are now (503 while one is unknown).
    sealer = rt.transports.of(task).sealer(task)
    opened = await open_decision(rt, task, decision_id)
    x = opened.state
    randomizer = rt.report_randomizer(task)
    try:
        row = handler(cfg).report_row(randomizer, x, reward, eps, rt.rng)
        encoded = await sealer.seal(randomizer, row)
    except ValueError as exc:  # cannot happen for a vector accepted by decide; stay a 4xx anyway
        raise InvalidReport(str(exc)) from None
    # Re-checks the decision: of two concurrent feedbacks exactly one gets here first.
    seq = await rt.store.complete_feedback(
        opened.uid, task, encoded.report_json, transport=encoded.transport,
        key_id=encoded.key_id, slot=slot,
    )
    if seq is None:  # the person's bound was reached: the sealed report was dropped unstored
        rt.metrics.withheld.labels(task).inc()
        return FeedbackResponse(queued=False, withheld=True,
                                outbox_pending=rt.store.counters.outbox_pending)
    rt.uploader.wake()
    rt.metrics.feedbacks.labels(task).inc()
    return FeedbackResponse(queued=True, outbox_pending=rt.store.counters.outbox_pending)
