"""Regret plots (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # matplotlib is imported lazily (module load stays fast for the CLI)
    from matplotlib.figure import Figure


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


def _pyplot() -> ModuleType:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def curves_plot(series: list[dict[str, Any]], path: Path, title: str,
                ylabel: str = "cumulative pseudo-regret", logy: bool = False) -> None:
    """Several mean regret curves, each ``{"label", "curve": [[t, mean], ...], "stderr"}``, with
    ±1 standard-error bands (experiments of issue 8)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=120)
    for i, s in enumerate(series):
        curve = np.asarray(s["curve"], dtype=float)
        t, mean = curve[:, 0], curve[:, 1]
        color = s.get("color", f"C{i % 10}")
        ax.plot(t, mean, label=s["label"], color=color, ls=s.get("ls", "-"))
        se = s.get("stderr")
        if se is not None and len(se) == len(t):
            se = np.asarray(se, dtype=float)
            ax.fill_between(t, mean - se, mean + se, color=color, alpha=0.2)
    if logy:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.set_xlabel("users t")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    _save(fig, plt, path)


def xy_plot(panels: list[dict[str, Any]], path: Path, title: str) -> None:
    """Side-by-side panels of labelled lines/points: each panel ``{"title", "xlabel", "ylabel",
    "logx", "logy", "xticks"?, "lines": [{"label", "x", "y", "yerr"?, "style"?, "color"?}]}``."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.5), dpi=120,
                             squeeze=False)
    for ax, panel in zip(axes[0], panels, strict=True):
        for i, line in enumerate(panel["lines"]):
            style = line.get("style", "o-")
            ax.errorbar(line["x"], line["y"], yerr=line.get("yerr"), fmt=style,
                        color=line.get("color", f"C{i % 10}"), label=line["label"],
                        capsize=3, ms=4)
        if panel.get("logx"):
            ax.set_xscale("log")
        if panel.get("logy"):
            ax.set_yscale("log")
        if panel.get("xticks"):
            ax.set_xticks(panel["xticks"], [f"{v:g}" for v in panel["xticks"]])
            ax.xaxis.set_minor_locator(plt.NullLocator())
        ax.set_title(panel.get("title", ""))
        ax.set_xlabel(panel.get("xlabel", ""))
        ax.set_ylabel(panel.get("ylabel", ""))
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    fig.suptitle(title)
    _save(fig, plt, path)


def _save(fig: Figure, plt: ModuleType, path: Path) -> None:
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
