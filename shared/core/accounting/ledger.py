"""The privacy ledger: what each observer could learn about one user (spec §3 and §6).

A ledger is pure data. Every accountant in this package returns one; the simulator, the
`privbandit privacy` command and the analyzer's `/privacy` endpoint all serialise the same object,
so the JSON field names below are the contract of spec §6 and must not change.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

ThreatModel = Literal["none", "ldp", "shuffle", "central"]


class PrivacyLedger(BaseModel):
    """Privacy spent, per observer. Fields that do not apply are ``None`` (JSON ``null``).

    - ``ldp_epsilon`` / ``ldp_delta``: the guarantee of one report against an observer between the
      device and the shuffler (Garcelon threat model "a").
    - ``central_epsilon`` / ``central_delta``: the guarantee against an observer of everything the
      analyzer sees (threat model "b"; in ``central`` mode the trusted curator's (ε, δ) conversion).
    - ``rdp_alpha`` / ``rdp_epsilon``: the Rényi-DP guarantee of ``central`` mode (Azize–Basu).
    - ``accounting``: which bound and which composition produced the figures, in words.
    """

    model_config = ConfigDict(extra="allow")

    threat_model: ThreatModel
    ldp_epsilon: float | None = None
    ldp_delta: float | None = None
    central_epsilon: float | None = None
    central_delta: float | None = None
    rdp_alpha: float | None = None
    rdp_epsilon: float | None = None
    accounting: str = ""
