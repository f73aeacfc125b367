"""Privacy parameters that several policy configs share, as mixins of their pydantic models.

A mixin lists ``algo`` first so that a config keeps its field order (and its JSON form, e.g. in
``TaskInfo.policy``) whatever it mixes in: the family's parameters, then ``algo``, then these.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class RenyiDP(BaseModel):
    """(α, ε)-Rényi DP of a trusted analyzer's Gaussian noise (Azize & Basu 2023), reported as
    (ε', δ)-DP through the RDP conversion at δ (``accounting.ledgers.central_ledger``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    algo: str
    alpha: float = Field(2.0, gt=1, description="Rényi order α")
    epsilon: float = Field(1.0, gt=0, description="RDP ε at order α")
    delta: float = Field(1e-6, gt=0, lt=1, description="δ of the (ε, δ) conversion")
