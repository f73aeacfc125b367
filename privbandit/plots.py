"""Regret plots (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def regret_plot(result: dict[str, Any], path: Path, title: str | None = None) -> None:
    """Cumulative pseudo-regret with a ±1 standard-error band (when several runs exist)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = np.asarray(result["regret_curve"], dtype=float)
    t, mean = curve[:, 0], curve[:, 1]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    ax.plot(t, mean, label=result.get("algo", "policy"), color="C0")
    se = result.get("regret_curve_stderr")
    if se is not None and len(se) == len(t) and max(se) > 0:
        se = np.asarray(se)
        ax.fill_between(t, mean - se, mean + se, color="C0", alpha=0.25, label="±1 s.e.")
    if "random_regret_mean" in result:
        slope = result["random_regret_mean"] / t[-1]
        ax.plot(t, slope * t, "--", color="grey", label="uniformly random (expected)")
    p = result.get("privacy", {})
    eps = p.get("central_epsilon")
    sub = f"{p.get('threat_model', '')}" + (f", central ε={eps:.3g}" if eps else "")
    ax.set_title(title or f"{result.get('algo')} on {result.get('env')} ({sub})")
    ax.set_xlabel("users t")
    ax.set_ylabel("cumulative pseudo-regret")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
