"""What an operator looks at on the analyzer (issue 26): a gauge per task of the privacy spent,
batches, reports counted, refused and queued (``TaskCollector``, on the analyzer's registry),
and the read-only status page ``GET /status`` (``render``).

Both read the same figures as ``GET /v1/tasks/{task}/privacy``: the task's counters as committed
(they survive restarts, unlike the ``*_total`` counters of this process) and its ledger
(``AnalyzerRuntime.ledger``: the ε and δ the task's accounting states against each observer,
``shared.core.accounting.ledger.PrivacyLedger``). Reading a ledger can take about a second the
first time for a linear task, so both are read off the event loop (``snapshot`` in a worker
thread).

The page is one HTML document with inline CSS and nothing else: no script, image, font or style
sheet is fetched (its Content-Security-Policy forbids it), so it works where the deployment has
no internet access; every value is HTML-escaped.
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from privbandit.shared.core.accounting.ledger import Aggregation, PrivacyLedger

if TYPE_CHECKING:
    from privbandit.services.analyzer.runtime import AnalyzerRuntime

PREFIX = "privbandit_analyzer_"
# The page's header: no fetches of any kind, inline styles only.
CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
# Observers a ledger states a guarantee against (the PrivacyLedger fields' prefixes).
OBSERVERS = ("central", "ldp")


@dataclass(frozen=True)
class TaskStatus:
    """One task's figures at one instant."""

    id: str
    algo: str
    threat_model: str
    aggregation: Aggregation
    batch_size: int
    model_version: int
    batches: int
    reports_counted: int
    rejected: int
    duplicates: int
    quarantined: int
    queued_batches: int
    ledger: PrivacyLedger

    @property
    def reports_refused(self) -> int:
        return self.rejected + self.duplicates + self.quarantined

    def per_user(self) -> dict[str, object] | None:
        """A per-user task's ε_t (``distribution``, ``mean``, ``fraction_used``,
        ``fraction_declined``: HeLDP, Garcelon et al.'s users at their own levels), else None."""
        levels = self.ledger.levels
        return None if levels is None else levels.model_dump()

    def spent(self) -> Iterator[tuple[str, float | None, float | None]]:
        """(observer, ε, δ) for each observer the ledger states a guarantee against."""
        for observer in OBSERVERS:
            eps = getattr(self.ledger, f"{observer}_epsilon")
            delta = getattr(self.ledger, f"{observer}_delta")
            if eps is not None or delta is not None:
                yield observer, eps, delta


def snapshot(runtime: AnalyzerRuntime) -> list[TaskStatus]:
    """Every task's figures (blocking: run it in a worker thread)."""
    out = []
    for rt in runtime.tasks.values():
        committer = rt.committer
        out.append(TaskStatus(
            id=rt.id,
            algo=rt.config.policy.algo,
            threat_model=rt.config.threat_model,
            aggregation=rt.config.aggregation,
            batch_size=rt.config.batch_size,
            model_version=rt.published.version,
            batches=rt.batches,
            reports_counted=rt.reports_counted,
            rejected=rt.rejected,
            duplicates=rt.duplicates,
            quarantined=rt.quarantined,
            queued_batches=committer.queued() if committer is not None else 0,
            ledger=runtime.ledger(rt),
        ))
    return out


class TaskCollector(Collector):
    """The per-task gauges, read from the runtime at each scrape:

    - ``privacy_epsilon{task, observer}`` and ``privacy_delta{task, observer}``: the guarantee
      the task's ledger states against each observer (``central``: everything the analyzer
      sees; ``ldp``: one report between device and shuffler), absent where it states none;
    - ``task_batches{task}``, ``task_reports_counted{task}``,
      ``task_reports_refused{task, reason}`` (``rejected``, ``duplicate``, ``quarantined``):
      the task's committed totals (since the task began, not since this process started);
    - ``task_batches_queued{task}``: batches received and waiting for their group commit;
    - for a task whose users choose their own ε_t: ``privacy_per_user_epsilon_mean{task}`` and
      ``privacy_per_user_fraction{task, kind}`` (``used``, ``declined``) as its ledger states them.

    Reports accepted by the shuffler but not yet delivered are the shuffler's
    ``privbandit_shuffler_pending_reports``."""

    def __init__(self, runtime: AnalyzerRuntime) -> None:
        self.runtime = runtime

    def describe(self) -> list[GaugeMetricFamily]:
        return list(self._families([]))

    def collect(self) -> list[GaugeMetricFamily]:
        return list(self._families(snapshot(self.runtime)))

    @staticmethod
    def _families(tasks: list[TaskStatus]) -> Iterator[GaugeMetricFamily]:
        eps = GaugeMetricFamily(PREFIX + "privacy_epsilon",
                                "Privacy spent: the epsilon the task's ledger states, by observer",
                                labels=["task", "observer"])
        delta = GaugeMetricFamily(PREFIX + "privacy_delta",
                                  "Privacy spent: the delta the task's ledger states, by observer",
                                  labels=["task", "observer"])
        batches = GaugeMetricFamily(PREFIX + "task_batches",
                                    "Batches processed since the task began (quarantined "
                                    "included)", labels=["task"])
        counted = GaugeMetricFamily(PREFIX + "task_reports_counted",
                                    "Reports counted since the task began", labels=["task"])
        refused = GaugeMetricFamily(PREFIX + "task_reports_refused",
                                    "Reports delivered but not counted since the task began, "
                                    "by reason", labels=["task", "reason"])
        queued = GaugeMetricFamily(PREFIX + "task_batches_queued",
                                   "Batches received and waiting for their group commit",
                                   labels=["task"])
        per_user = GaugeMetricFamily(PREFIX + "privacy_per_user_epsilon_mean",
                                     "Mean of the users' own epsilon_t (per-user tasks)",
                                     labels=["task"])
        fraction = GaugeMetricFamily(PREFIX + "privacy_per_user_fraction",
                                     "Fraction of the users whose reports are used or who "
                                     "declined (per-user tasks)", labels=["task", "kind"])
        for t in tasks:
            for observer, e, d in t.spent():
                if e is not None:
                    eps.add_metric([t.id, observer], e)
                if d is not None:
                    delta.add_metric([t.id, observer], d)
            batches.add_metric([t.id], t.batches)
            counted.add_metric([t.id], t.reports_counted)
            for reason, n in (("rejected", t.rejected), ("duplicate", t.duplicates),
                              ("quarantined", t.quarantined)):
                refused.add_metric([t.id, reason], n)
            queued.add_metric([t.id], t.queued_batches)
            if (users := t.per_user()) is not None:
                if isinstance(mean := users.get("mean"), int | float):
                    per_user.add_metric([t.id], mean)
                for kind in ("used", "declined"):
                    if isinstance(f := users.get(f"fraction_{kind}"), int | float):
                        fraction.add_metric([t.id, kind], f)
        yield from (eps, delta, batches, counted, refused, queued, per_user, fraction)


# ---------------------------------------------------------------------------------------------
# The status page

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}
h1{font-size:1.3em;margin:0 0 .2em}
.meta{color:#555;margin-bottom:1em}
.ok{color:#1a7f37;font-weight:600}.wait{color:#b35900;font-weight:600}
table{border-collapse:collapse;margin-bottom:1.5em;background:#fff}
th,td{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}
th{background:#eee}td.n{text-align:right;font-variant-numeric:tabular-nums}
.small{font-size:.85em;color:#555;max-width:40em}
"""


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _num(value: float | None) -> str:
    if value is None:
        return "—"
    if isinstance(value, int) or float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.6g}"


def _rdp(ledger: PrivacyLedger) -> str:
    if ledger.rdp_alpha is None or ledger.rdp_epsilon is None:
        return "—"
    return f"α={_num(ledger.rdp_alpha)}, ε={_num(ledger.rdp_epsilon)}"


def _users(users: dict[str, object] | None) -> str:
    if users is None:
        return "—"
    parts = [f"{key.removeprefix('fraction_')} {_num(v) if isinstance(v, int | float) else v}"
             for key, v in users.items()]
    return ", ".join(parts)


def _cell(value: object, *, numeric: bool = False, data: str = "") -> str:
    cls = ' class="n"' if numeric else ""
    attr = f' data-field="{_esc(data)}"' if data else ""
    return f"<td{cls}{attr}>{_esc(value)}</td>"


def render(tasks: list[TaskStatus], missing: dict[str, list[str]], now: float | None = None) -> str:
    """The status page: readiness, then one row per task (model, batches, reports) and one per
    task and observer (the ledger). ``missing``: what readiness still waits for
    (``Readiness.missing()``)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(now))
    if missing:
        waiting = "; ".join(f"{what}: {', '.join(items)}" for what, items in missing.items())
        state = f'<span class="wait" id="state">starting — waiting for {_esc(waiting)}</span>'
    else:
        state = '<span class="ok" id="state">ready</span>'
    rows = []
    for t in tasks:
        rows.append(
            f'<tr id="task-{_esc(t.id)}">' + "".join([
                _cell(t.id, data="task"), _cell(t.algo), _cell(t.threat_model),
                _cell(t.aggregation), _cell(_num(t.batch_size), numeric=True),
                _cell(_num(t.model_version), numeric=True, data="model_version"),
                _cell(_num(t.batches), numeric=True, data="batches"),
                _cell(_num(t.reports_counted), numeric=True, data="reports_counted"),
                _cell(_num(t.reports_refused), numeric=True, data="reports_refused"),
                _cell(f"{_num(t.rejected)} / {_num(t.duplicates)} / {_num(t.quarantined)}",
                      numeric=True),
                _cell(_num(t.queued_batches), numeric=True, data="queued_batches"),
            ]) + "</tr>")
    ledger_rows = []
    for t in tasks:
        spent = list(t.spent()) or [("—", None, None)]
        for observer, eps, delta in spent:
            ledger_rows.append(
                f'<tr id="ledger-{_esc(t.id)}-{_esc(observer)}">' + "".join([
                    _cell(t.id), _cell(t.ledger.threat_model), _cell(observer),
                    _cell(_num(eps), numeric=True, data="epsilon"),
                    _cell(_num(delta), numeric=True, data="delta"),
                    _cell(_rdp(t.ledger)), _cell(_users(t.per_user()), data="per_user"),
                    f'<td class="small">{_esc(t.ledger.accounting)}</td>',
                ]) + "</tr>")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1">
<title>privbandit analyzer — status</title>
<style>{_STYLE}</style></head>
<body>
<h1>privbandit analyzer</h1>
<div class="meta">State: {state} · {_esc(len(tasks))} task(s) · as of {_esc(stamp)} ·
read-only; machine-readable: <code>/metrics</code>,
<code>/v1/tasks/&lt;task&gt;/privacy</code></div>
<h2>Tasks</h2>
<table id="tasks"><thead><tr><th>task</th><th>policy</th><th>threat model</th>
<th>aggregation</th><th>batch size</th><th>model version</th><th>batches</th>
<th>reports counted</th><th>reports refused</th><th>rejected / duplicate / quarantined</th>
<th>batches queued</th></tr></thead>
<tbody>{''.join(rows)}</tbody></table>
<h2>Privacy ledger</h2>
<table id="ledger"><thead><tr><th>task</th><th>threat model</th><th>observer</th><th>ε</th>
<th>δ</th><th>Rényi DP (α, ε)</th><th>per-user ε_t</th><th>accounting</th></tr></thead>
<tbody>{''.join(ledger_rows)}</tbody></table>
</body></html>
"""
