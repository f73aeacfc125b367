"""The published model of one task, the wake-up signal of its Server-Sent Events streams, and
the analyzer-wide bound on open streams."""

from __future__ import annotations

import asyncio

from shared.core.policies.adar_gope import PhaseModel
from shared.core.policies.arm_model import ArmModel
from shared.core.policies.bco_model import BCOModel
from shared.core.policies.model import GLBModel, Model
from shared.protocol.messages import (
    AnyModelMessage,
    ArmModelMessage,
    BCOModelMessage,
    GLBModelMessage,
    ModelMessage,
    PhaseModelMessage,
)


def model_message(task: str, model: Model | ArmModel | BCOModel | PhaseModel
                  ) -> AnyModelMessage:
    """The wire form of a published model: (θ̃, V, β) for a linear task, the device's arm rule
    (``ArmModel.to_dict``: indices, probabilities or the episode's arm) for a multi-armed one,
    the point and its exploration (``BCOModel.to_dict``) for a BCO one; an ``ldp-glb`` model
    carries θ̂ besides (θ̃, V, β); an ``adar-gope`` phase its arms and design (``phase_message``)."""
    if isinstance(model, PhaseModel):
        return phase_message(task, model)
    if isinstance(model, GLBModel):
        return GLBModelMessage(task=task, **model.to_dict())
    if isinstance(model, BCOModel):
        return BCOModelMessage(task=task, **model.to_dict())
    if isinstance(model, ArmModel):
        return ArmModelMessage(task=task, **model.to_dict())
    return ModelMessage(
        task=task,
        version=model.version,
        theta=[float(v) for v in model.theta],
        V=[[float(v) for v in row] for row in model.V],
        beta=float(model.beta),
        reports=int(model.reports),
    )


def phase_message(task: str, model: PhaseModel) -> PhaseModelMessage:
    """What devices need of an AdaR-GOPE phase: no play order (they sample from π_ℓ)."""
    assert model.weights is not None
    return PhaseModelMessage(
        task=task, version=model.version, reports=model.reports, phase=model.phase,
        beta=model.beta, active=model.active.tolist(), support=model.support.tolist(),
        weights=model.weights.tolist(), counts=model.counts.tolist(),
        length=None if model.active.size == 1 else int(model.counts.sum()))


class ModelFeed:
    """The latest published model of one task and a wake-up signal for stream subscribers.

    Used from the event loop only. Subscribers read ``current`` and then ``await wait()`` with
    no suspension in between, so a publication can never fall between the two.
    """

    def __init__(self, current: AnyModelMessage) -> None:
        self.current = current
        self.closed = False
        self._changed = asyncio.Event()

    def publish(self, message: AnyModelMessage) -> None:
        self.current = message
        self._wake()

    def close(self) -> None:
        """End every subscription (service shutdown)."""
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    async def wait(self, timeout: float) -> bool:
        """True when woken by a publication or close, False after ``timeout`` seconds."""
        event = self._changed
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            return False
        return True


class StreamSlots:
    """At most ``limit`` model streams open at once (event loop only): ``acquire`` before a
    stream starts, ``release`` exactly once when it ends, however it ends."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("limit must be >= 1")
        self.limit = limit
        self.open = 0

    def acquire(self) -> bool:
        if self.open >= self.limit:
            return False
        self.open += 1
        return True

    def release(self) -> None:
        self.open -= 1
