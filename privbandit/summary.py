"""Human-readable lines for a privacy ledger, shared by `privbandit simulate` and `demo`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def fmt(v: Any) -> str:
    """A ledger value for people: 4 significant digits, "—" for a field that does not apply."""
    if v is None:
        return "—"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def local_note(ldp_epsilon: Any, central_epsilon: Any, k: int | None = None) -> str | None:
    """Why a local ε far above the central one is not alarming, for the line after it; None
    when it is not (issue 45 item 8: "per-report LDP ε 122 under a central ε of 1")."""
    if not isinstance(ldp_epsilon, int | float) or not isinstance(central_epsilon, int | float):
        return None
    if ldp_epsilon <= max(1.0, 2 * central_epsilon):
        return None
    what = (f"the {k} reports' local ε composed, what they reveal" if k is not None
            else "what one report reveals")
    return (f"(large by design: {what} to whoever sees it before the shuffle — the wire, the "
            "shuffler; the analyzer and everyone after it see only shuffled batches, bounded by "
            "the central ε)")


def pair(eps: Any, delta: Any) -> str:
    """"ε=…, δ=…", or "— (does not apply)"."""
    return "— (does not apply)" if eps is None else f"ε={fmt(eps)}, δ={fmt(delta)}"


def person_lines(person: dict[str, Any] | None, label: str = "    per person      ") -> list[str]:
    """The per-person guarantee (at most k reports per person), with ``local_note``'s
    explanation on the next line when its local ε would alarm."""
    if person is None or person.get("k") is None:
        return []
    period = f" ({person['period']})" if person.get("period") else ""
    lines = [f"{label}  at most k={person['k']} reports{period}: local "
             f"{pair(person['ldp_epsilon'], person['ldp_delta'])}; central "
             f"{pair(person['central_epsilon'], person['central_delta'])}"]
    note = local_note(person["ldp_epsilon"], person["central_epsilon"], person["k"])
    return lines + ([f"{' ' * len(label)}  {note}"] if note else [])


def ledger_lines(
    p: dict[str, Any], suffix: str = "", escape: Callable[[str], str] = str
) -> list[str]:
    """The ledger block of a summary (``suffix`` follows the threat model; ``escape`` protects
    free text from a markup renderer such as rich)."""
    lines = [
        f"  privacy           threat model {p.get('threat_model')}{suffix}",
        f"    LDP (per report)  ε={fmt(p.get('ldp_epsilon'))}, δ={fmt(p.get('ldp_delta'))}",
        f"    central           ε={fmt(p.get('central_epsilon'))}, "
        f"δ={fmt(p.get('central_delta'))}",
    ]
    if note := local_note(p.get("ldp_epsilon"), p.get("central_epsilon")):
        lines.insert(2, f"                      {note}")
    if "central_epsilon_paper" in p:
        lines.append(f"    central (paper)   ε={fmt(p.get('central_epsilon_paper'))}  (Garcelon "
                     "Thm 5; — where its conditions fail)")
    if p.get("rdp_alpha") is not None:
        lines.append(f"    RDP               α={fmt(p['rdp_alpha'])}, ε={fmt(p['rdp_epsilon'])}")
    if per_user := p.get("per_user_epsilon"):
        lines.append(f"    per-user ε        {escape(str(per_user['distribution']))}: mean "
                     f"{fmt(per_user.get('mean'))}, used {fmt(per_user.get('fraction_used'))}, "
                     f"declined {fmt(per_user.get('fraction_declined'))}  (each user's own ε_t)")
    if p.get("accounting"):
        lines.append(f"    accounting        {escape(str(p['accounting']))}")
    return lines
