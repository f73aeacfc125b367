"""Overlap (support) diagnostics of an importance-weighted estimate, and when to refuse one.

With logged rounds (x_i, a_i, r_i), the logging policy's propensity p_i = π_0(a_i | x_i) and an
evaluated policy π_e, the weights are w_i = π_e(a_i | x_i) / p_i (``ope``). IPS and SNIPS are
unbiased for V(π_e) = E_x Σ_a π_e(a|x) μ(x, a) only where π_0(a | x) > 0 whenever
π_e(a | x) > 0 (Strehl et al. 2010, Assumption 1; Owen 2013, §9.1): the evaluated policy's mass
on actions the logger never takes, U = E_x Σ_a π_e(a|x) 1[π_0(a|x) = 0], is invisible to them
(IPS then estimates V(π_e) − E_x Σ_{a: π_0 = 0} π_e(a|x) μ(x, a), an error up to U times the
reward range), and DR covers it with its reward model alone.

    effective sample size   ESS = (Σ w_i)² / Σ w_i²   (Kish 1965; Owen 2013, Eq. 9.13): the
                            number of equally weighted rounds the estimate is as precise as
    max weight              max_i w_i (one round's share of IPS is w_i r_i / n)
    unsupported share       Û = (1/n) Σ_i Σ_a π_e(a|x_i) 1[π_0(a|x_i) = 0] where the log holds
                            π_0's whole distribution (``pi_b``); otherwise only rounds with
                            p_i = 1 tell that every other action has π_0 = 0, and
                            Û_low = (1/n) Σ_{i: p_i = 1} (1 − π_e(a_i | x_i)) is a lower bound

A log of a deterministic (greedy) policy has every p_i = 1: each round where π_e departs from it
is unsupported, and Û_low is exact.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

# An estimate is refused (IPS, SNIPS) when more than this share of the evaluated policy's
# choices falls where the logging policy never acts: the estimate would miss it silently.
MAX_UNSUPPORTED = 0.05
# Fewer effective rounds than this: the normal interval's coverage is not to be trusted
# (a warning, not a refusal: the estimate is still unbiased).
MIN_ESS = 100.0
# One round carrying more than this share of the total weight dominates the estimate.
MAX_WEIGHT_SHARE = 0.05


@dataclass(frozen=True)
class Overlap:
    """The diagnostic of one evaluated policy on one log (module docstring)."""

    n: int
    ess: float
    max_weight: float
    unsupported: float  # Û, or its lower bound Û_low when not ``unsupported_exact``
    unsupported_exact: bool
    deterministic_log: bool  # every p_i = 1
    warnings: tuple[str, ...]
    refusal: str | None  # why IPS and SNIPS are refused, or None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["warnings"] = list(self.warnings)
        return out

    def summary(self) -> str:
        """One line: ESS, max weight, unsupported share."""
        bound = "" if self.unsupported_exact else " (at least)"
        return (f"overlap: ESS {self.ess:.1f} of {self.n} rounds, max weight "
                f"{self.max_weight:.3g}, unsupported share {self.unsupported:.3f}{bound}")


def overlap(action: np.ndarray, pscore: np.ndarray, action_dist: np.ndarray,
            pi_b: np.ndarray | None = None, *, max_unsupported: float = MAX_UNSUPPORTED,
            min_ess: float = MIN_ESS) -> Overlap:
    """The diagnostic of π_e (``action_dist``, (n, K)) on logged actions and propensities;
    ``pi_b`` (n, K): the logging policy's distributions where known (then Û is exact)."""
    action = np.asarray(action, dtype=np.int64)
    n = action.shape[0]
    pi = np.asarray(action_dist, dtype=float)
    p = np.asarray(pscore, dtype=float)
    rows = np.arange(n)
    w = pi[rows, action] / p
    total = float(w.sum())
    ess = total ** 2 / float((w ** 2).sum()) if total > 0 else 0.0
    max_w = float(w.max()) if n else 0.0
    deterministic = bool(n) and bool((p == 1).all())
    if pi_b is not None:
        b = np.asarray(pi_b, dtype=float)
        if b.ndim == 3:
            b = b[:, :, 0]
        unsupported = float((pi * (b == 0)).sum(axis=1).mean())
        exact = True
    else:
        unsupported = float(np.where(p == 1, 1.0 - pi[rows, action], 0.0).mean()) if n else 0.0
        exact = deterministic
    warnings: list[str] = []
    refusal = None
    if deterministic:
        warnings.append("every logged propensity is 1: the logging policy was deterministic, "
                        "so only rounds where the evaluated policy agrees with it carry "
                        "information")
    if unsupported > max_unsupported:
        refusal = (f"{unsupported:.1%} of the evaluated policy's choices are actions the "
                   f"logging policy never takes{'' if exact else ' (at least)'}: IPS and SNIPS "
                   "cannot see them (log with exploration: an epsilon-greedy or softmax "
                   "logging policy, or uniform)")
    elif unsupported > 0:
        warnings.append(f"{unsupported:.1%} of the evaluated policy's choices are unsupported "
                        "by the log: IPS and SNIPS miss their reward")
    if total == 0:
        warnings.append("the evaluated policy never takes a logged action: every weight is 0")
    elif ess < min_ess:
        warnings.append(f"effective sample size {ess:.1f} < {min_ess:g}: the normal "
                        "interval may not cover at its level")
    if total > 0 and max_w / total > MAX_WEIGHT_SHARE:
        warnings.append(f"one round carries {max_w / total:.0%} of the total weight")
    return Overlap(n, ess, max_w, unsupported, exact, deterministic, tuple(warnings), refusal)
