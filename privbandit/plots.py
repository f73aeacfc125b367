"""Regret plots (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # matplotlib is imported lazily (module load stays fast for the CLI)
    from matplotlib.figure import Figure


# The random policy's regret beyond this multiple of the policy's flattens the policy's curve
# against the axis: the plot then adds an inset with the policy alone.
INSET_RATIO = 3.0


def guarantee(p: dict[str, Any]) -> str:
    """The ledger's guarantee for a title: the threat model and (ε, δ) against the central
    observer (or, without one, the local one)."""
    for observer in ("central", "ldp"):
        eps, delta = p.get(f"{observer}_epsilon"), p.get(f"{observer}_delta")
        if eps is not None:
            return (f"{p.get('threat_model', '')}, {observer} ε = {eps:.3g}, "
                    f"δ = {delta if delta is not None else 0:.2g}")
    return str(p.get("threat_model", ""))


def _policy_curves(ax: Any, result: dict[str, Any], t: np.ndarray, mean: np.ndarray,
                   legend: bool) -> None:
    """The policy's curve, its ±1 s.e. band (several runs) and the simulator's spread (a
    demo's ``reference``: the 10–90 % range and the mean of its runs) on ``ax``."""
    ref = (result.get("reference") or {}).get("curve")
    if ref is not None:
        rt = np.asarray(ref["t"], dtype=float)
        ax.fill_between(rt, ref["p10"], ref["p90"], color="C1", alpha=0.25,
                        label="simulator, same users: 10–90 % of runs" if legend else None)
        ax.plot(rt, ref["mean"], ":", color="C1",
                label="simulator, mean of runs" if legend else None)
    ax.plot(t, mean, label=result.get("algo", "policy") if legend else None, color="C0")
    se = result.get("regret_curve_stderr")
    if se is not None and len(se) == len(t) and max(se) > 0:
        se = np.asarray(se)
        ax.fill_between(t, mean - se, mean + se, color="C0", alpha=0.25,
                        label="±1 s.e." if legend else None)


def regret_plot(result: dict[str, Any], path: Path, title: str | None = None) -> None:
    """``regret_figure`` written to ``path`` (PNG)."""
    fig = regret_figure(result, title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    _pyplot().close(fig)


def regret_figure(result: dict[str, Any], title: str | None = None) -> Figure:
    """Cumulative pseudo-regret with a ±1 standard-error band (when several runs exist), the
    simulator's spread as a band (``result["reference"]``, a demo's ``simulator_reference``)
    and the uniformly random policy's expected regret. The title states the guarantee (ε, δ);
    when the random policy's regret dwarfs the policy's, an inset shows the policy's curves on
    their own scale."""
    plt = _pyplot()
    curve = np.asarray(result["regret_curve"], dtype=float)
    t, mean = curve[:, 0], curve[:, 1]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    _policy_curves(ax, result, t, mean, legend=True)
    legend = "upper left"
    if "random_regret_mean" in result:
        slope = result["random_regret_mean"] / t[-1]
        ax.plot(t, slope * t, "--", color="grey", label="uniformly random (expected)")
        ref = (result.get("reference") or {}).get("curve")
        top = max(float(mean.max()), max(ref["p90"]) if ref is not None else 0.0, 1e-9)
        if result["random_regret_mean"] > INSET_RATIO * top:
            # Above the random line's diagonal (empty), the legend to the right between the
            # two curves.
            inset = ax.inset_axes((0.1, 0.5, 0.36, 0.38))
            legend = "center right"
            _policy_curves(inset, result, t, mean, legend=False)
            inset.set_title("the policy alone", fontsize=8)
            inset.tick_params(labelsize=7)
            inset.grid(alpha=0.3)
    sub = guarantee(result.get("privacy", {}))
    ax.set_title(f"{title} ({sub})" if title else
                 f"{result.get('algo')} on {result.get('env')} ({sub})", fontsize=10)
    ax.set_xlabel("users t")
    ax.set_ylabel("cumulative pseudo-regret")
    ax.grid(alpha=0.3)
    ax.legend(loc=legend, fontsize=8)
    fig.tight_layout()
    return fig


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
