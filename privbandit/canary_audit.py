"""The one-run audit of a running deployment (issue 43, item 5; Steinke, Nasr, Jagielski 2023).

m canaries go in through the device API of an ``ldp-linucb`` task that publishes a model after
every report (``update_every = 1``): canary i is a user whose K feature vectors are all
s_i·x (so the device has no choice to make) with reward 1, s_i = ±1 drawn by the auditor with
probability ½ each, x = L·e₀. The pair (x, 1), (−x, 1) has equal Gram parts and reward parts
2x apart: 2L of the Gaussian report's joint sensitivity (2.12 at L = 1). Under PrivUnit2 (the
task's ``mechanism = "privunit"``, pure ε: the ledger's δ is 0) both report vectors have the
full norm r, at an angle of 90° at L = 1 in the plain encoding; the same score separates them.
The result names the mechanism the task's config uses.

The auditor sees only the published models. Each publication is (Ṽ, θ̃) with θ̃ = Ṽ⁻¹ũ
(``confidence.ridge_solve``: whatever eigenvalue repair Ṽ got, θ̃ solves it exactly), so
ũ = Ṽθ̃, and the difference of ũ between the versions before and after canary i is that canary's
noisy reward part s_i x + ξ_i: its score is ⟨Δũ, x⟩. The auditor guesses s_i = +1 for the
``guess_fraction``·m/2 highest scores, −1 for as many lowest, abstains on the rest (a rule fixed
before the scores are seen), and ``bounds.one_run_epsilon`` turns the number of right guesses into
ε_lo at the ledger's δ. A canary whose publication covers more than one report (a skipped
update) is left out of the guesses (abstaining, independent of s_i).

The bound is loose by construction (one run, m canaries, a test on the reward part only; the
paper's Figure 1 needs m in the thousands to approach ε): it shows the deployment's published
models leak no more than the ledger allows, at this power, never that they leak less.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import httpx
import numpy as np

from privbandit.shared.core.audit.bounds import one_run_epsilon


@dataclass(frozen=True)
class CanaryAudit:
    """What the one-run audit of a task found, beside the task's ledger."""

    task: str
    mechanism: str  # the task's report: "gaussian" or "privunit" (its config's ``mechanism``)
    canaries: int
    guesses: int
    correct: int
    audited_epsilon_lower: float
    central_epsilon: float
    central_delta: float
    confidence: float

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _u_of(model: dict[str, Any]) -> np.ndarray:
    V = np.asarray(model["V"], dtype=float)
    return V @ np.asarray(model["theta"], dtype=float)


def _next_model(analyzer: httpx.Client, task: str, version: int, timeout: float
                ) -> dict[str, Any]:
    """The first published model after ``version`` (polled with If-None-Match)."""
    end = time.monotonic() + timeout
    while True:
        resp = analyzer.get(f"/v1/tasks/{task}/model", headers={"If-None-Match": str(version)})
        if resp.status_code == 200:
            model = resp.json()
            if int(model["version"]) > version:
                return dict(model)
        elif resp.status_code != 304:
            resp.raise_for_status()
        if time.monotonic() > end:
            raise TimeoutError(f"no model of {task} after version {version} in {timeout:g} s")
        time.sleep(0.02)


def canary_audit(device_url: str, analyzer_url: str, task: str, canaries: int,
                 rng: np.random.Generator, guess_fraction: float = 0.5,
                 confidence: float = 0.95, timeout: float = 30.0) -> CanaryAudit:
    """Insert ``canaries`` canaries into ``task`` one at a time and audit the published models
    (module doc). ``rng`` draws the canaries' signs (the auditor's secret); the devices' noise is
    their own."""
    if not 0 < guess_fraction <= 1 or canaries < 2:
        raise ValueError("need 0 < guess_fraction <= 1 and at least 2 canaries")
    with httpx.Client(base_url=analyzer_url, timeout=timeout) as analyzer, \
            httpx.Client(base_url=device_url, timeout=timeout) as device:
        info = analyzer.get(f"/v1/tasks/{task}").raise_for_status().json()
        policy = info["policy"]
        if info["algo"] != "ldp-linucb" or policy.get("update_every") != 1 or \
                policy.get("intercept") is not None or policy.get("perturb", 0) != 0:
            raise ValueError(f"task {task}: the canary audit needs an ldp-linucb task without "
                             "an intercept or perturbation that publishes after every report "
                             "(update_every = 1)")
        d, K, L = int(info["d"]), int(info["K"]), float(policy.get("L", 1.0))
        x = np.zeros(d)
        x[0] = L
        signs = rng.choice([-1.0, 1.0], size=canaries)
        model = analyzer.get(f"/v1/tasks/{task}/model").raise_for_status().json()
        scores = np.full(canaries, np.nan)
        for i, s in enumerate(signs):
            before = model
            features = [(s * x).tolist()] * K
            did = device.post(f"/v1/tasks/{task}/decide",
                              json={"features": features}).raise_for_status().json()
            device.post(f"/v1/tasks/{task}/feedback",
                        json={"decision_id": did["decision_id"], "reward": 1.0}
                        ).raise_for_status()
            model = _next_model(analyzer, task, int(before["version"]), timeout)
            while int(model["reports"]) < int(before["reports"]) + 1:
                model = _next_model(analyzer, task, int(model["version"]), timeout)
            if int(model["reports"]) == int(before["reports"]) + 1:
                scores[i] = float((_u_of(model) - _u_of(before)) @ x)
        ledger = analyzer.get(f"/v1/tasks/{task}/privacy").raise_for_status().json()["ledger"]
    k = int(round(guess_fraction * canaries / 2))
    seen = np.flatnonzero(~np.isnan(scores))
    order = seen[np.argsort(scores[seen])]
    k = min(k, order.size // 2)
    low, high = order[:k], order[order.size - k:]
    correct = int((signs[high] > 0).sum() + (signs[low] < 0).sum())
    delta = float(ledger["central_delta"])
    mechanism = str(policy.get("mechanism", "gaussian"))
    return CanaryAudit(task, mechanism, canaries, 2 * k, correct,
                       one_run_epsilon(canaries, 2 * k, correct, delta, confidence),
                       float(ledger["central_epsilon"]), delta, confidence)
