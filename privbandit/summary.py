"""Human-readable lines for a privacy ledger, shared by `privbandit simulate` and `demo`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def fmt(v: Any) -> str:
    """A ledger value for people: 4 significant digits, "—" for a field that does not apply."""
    if v is None:
        return "—"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


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
