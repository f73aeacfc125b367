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
no internet access; every value is HTML-escaped. It reloads itself (``<meta http-equiv=
"refresh">``, no script) every ``?refresh=`` seconds (10 by default, 0: never). Beside the
analyzer's own figures it shows the other services as the analyzer reaches them (``peers``):
each shuffler replica's and the device's ``/healthz``, and the reports each task has pending at
the shuffler (its ``GET /v1/status``). A ledger's accounting prose, the same for every task of a
policy and observer, is written once, as a numbered note the ledger rows refer to.
"""

from __future__ import annotations

import asyncio
import html
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import httpx
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from privbandit.shared.core.accounting.ledger import Aggregation, PrivacyLedger
from privbandit.shared.protocol.messages import ErrorBody, ShufflerStatus
from privbandit.shared.settings import Settings

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
    last_batch_at: float | None = None

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
            last_batch_at=rt.last_batch_at,
        ))
    return out


@dataclass(frozen=True)
class Peer:
    """Another service as the analyzer reaches it: ``state`` is ``ok``, ``starting`` (its
    ``/healthz`` answered 503, ``detail`` says what it waits for) or ``unreachable``."""

    service: str
    url: str
    state: str
    detail: str = ""


@dataclass(frozen=True)
class Peers:
    """The other services, and each task's reports pending at the shuffler (the first replica
    that answers: replicas share one store); ``pending`` is empty when none answered."""

    services: list[Peer] = field(default_factory=list)
    pending: dict[str, int] = field(default_factory=dict)


async def _health(client: httpx.AsyncClient, service: str, url: str) -> Peer:
    try:
        resp = await client.get(url + "/healthz")
    except httpx.HTTPError as exc:
        return Peer(service, url, "unreachable", type(exc).__name__)
    if resp.status_code == 200:
        return Peer(service, url, "ok")
    try:
        detail = ErrorBody.model_validate_json(resp.content).message
    except ValueError:
        detail = f"HTTP {resp.status_code}"
    return Peer(service, url, "starting" if resp.status_code == 503 else "failing", detail)


async def _pending(client: httpx.AsyncClient, url: str) -> dict[str, int] | None:
    try:
        resp = await client.get(url + "/v1/status")
        resp.raise_for_status()
        status = ShufflerStatus.model_validate_json(resp.content)
    except (httpx.HTTPError, ValueError):
        return None
    return {t.task: t.pending for t in status.tasks}


async def peers(settings: Settings, client: httpx.AsyncClient) -> Peers:
    """Ask every shuffler replica and the device, at once (``client``'s timeout bounds the
    wait: an unreachable service must not hold the page)."""
    shufflers = settings.shuffler.all_urls
    checks = [_health(client, "shuffler", url) for url in shufflers]
    checks.append(_health(client, "device", settings.device.url))
    services, pending = await asyncio.gather(
        asyncio.gather(*checks), asyncio.gather(*(_pending(client, u) for u in shufflers)))
    return Peers(list(services), next((p for p in pending if p is not None), {}))


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
.small{font-size:.85em;color:#555;max-width:60em}
.bad{color:#b3261e;font-weight:600}
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


def _when(at: float | None, now: float) -> str:
    if at is None:
        return "— (none yet)"
    return (time.strftime("%H:%M:%S UTC", time.gmtime(at))
            + f" ({_num(max(0, round(now - at)))} s ago)")


def _peer_row(p: Peer) -> str:
    cls = {"ok": "ok", "starting": "wait"}.get(p.state, "bad")
    return (f'<tr id="peer-{_esc(p.service)}-{_esc(p.url)}">' + _cell(p.service) + _cell(p.url)
            + f'<td data-field="state" class="{cls}">{_esc(p.state)}</td>'
            + f'<td class="small">{_esc(p.detail)}</td></tr>')


def render(tasks: list[TaskStatus], missing: dict[str, list[str]], now: float | None = None,
           *, others: Peers | None = None, refresh: int = 10) -> str:
    """The status page: readiness and the other services (``others``), then one row per task
    (model, batches, reports, pending at the shuffler, last batch) and one per task and observer
    (the ledger), whose accounting prose is written once per distinct text, as notes.
    ``missing``: what readiness still waits for (``Readiness.missing()``); ``refresh``: seconds
    between reloads (0: none)."""
    now = time.time() if now is None else now
    others = others if others is not None else Peers()
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
                _cell(_num(others.pending.get(t.id)), numeric=True, data="pending_at_shuffler"),
                _cell(_when(t.last_batch_at, now), data="last_batch"),
            ]) + "</tr>")
    ledger_rows = []
    notes: dict[str, int] = {}  # accounting prose -> its note's number
    for t in tasks:
        spent = list(t.spent()) or [("—", None, None)]
        note = notes.setdefault(t.ledger.accounting, len(notes) + 1)
        for observer, eps, delta in spent:
            ledger_rows.append(
                f'<tr id="ledger-{_esc(t.id)}-{_esc(observer)}">' + "".join([
                    _cell(t.id), _cell(t.ledger.threat_model), _cell(observer),
                    _cell(_num(eps), numeric=True, data="epsilon"),
                    _cell(_num(delta), numeric=True, data="delta"),
                    _cell(_rdp(t.ledger)), _cell(_users(t.per_user()), data="per_user"),
                    _cell(f"[{note}]", data="note"),
                ]) + "</tr>")
    note_items = "".join(f'<li id="note-{n}" class="small">{_esc(text)}</li>'
                         for text, n in notes.items())
    peer_rows = "".join(_peer_row(p) for p in others.services)
    reload = (f'<meta http-equiv="refresh" content="{int(refresh)}">' if refresh > 0 else "")
    every = (f"reloads every {int(refresh)} s (<code>?refresh=0</code>: never)" if refresh > 0
             else "does not reload (<code>?refresh=10</code>: every 10 s)")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1">
{reload}
<title>privbandit analyzer — status</title>
<style>{_STYLE}</style></head>
<body>
<h1>privbandit analyzer</h1>
<div class="meta">State: {state} · {_esc(len(tasks))} task(s) · as of {_esc(stamp)} ·
{every} · read-only; machine-readable: <code>/metrics</code>,
<code>/v1/tasks/&lt;task&gt;/privacy</code></div>
<h2>Services</h2>
<table id="peers"><thead><tr><th>service</th><th>address</th><th>health</th><th>detail</th>
</tr></thead><tbody>{peer_rows}</tbody></table>
<h2>Tasks</h2>
<table id="tasks"><thead><tr><th>task</th><th>policy</th><th>threat model</th>
<th>aggregation</th><th>batch size</th><th>model version</th><th>batches</th>
<th>reports counted</th><th>reports refused</th><th>rejected / duplicate / quarantined</th>
<th>batches queued</th><th>pending at the shuffler</th><th>last batch</th></tr></thead>
<tbody>{''.join(rows)}</tbody></table>
<h2>Privacy ledger</h2>
<table id="ledger"><thead><tr><th>task</th><th>threat model</th><th>observer</th><th>ε</th>
<th>δ</th><th>Rényi DP (α, ε)</th><th>per-user ε_t</th><th>accounting</th></tr></thead>
<tbody>{''.join(ledger_rows)}</tbody></table>
<h3>Accounting</h3>
<ol id="notes">{note_items}</ol>
</body></html>
"""
