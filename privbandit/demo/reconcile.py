"""Counts and their reconciliation: a snapshot of the three services' counters, waiting until the
system is quiescent, and the spec §6 reconciliation of a run.

Quiescent means the device outbox is empty, every batch the shuffler formed is acknowledged, and
fewer than l reports wait in the shuffler. Then

    reports_accepted (shuffler) + feedbacks_withheld (device) == feedbacks_sent (driver)
    reports_counted + reports_refused (analyzer) + reports_pending (shuffler) == reports_accepted

where refused reports are those the analyzer rejected as invalid (alone, or as members of a
quarantined secure-sum batch) or dropped as duplicate report ids, and those the shuffler dropped
because the analyzer's Paillier key changed (``refused_stale_key``), and withheld feedbacks are
those the device answered without making a report: their person had reached the task's bound
(issue 24; 0 for a task without one).

When the services were already running, every count is the change during the run."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from privbandit.demo.config import DemoError
from privbandit.launcher import tls_context


@dataclass
class Snapshot:
    """The counters the reconciliation compares, at one moment."""

    accepted: int
    pending: int
    batches_formed: int
    batches_acknowledged: int
    batches_in_flight: int
    counted: int
    refused: int
    batches: int
    model_version: int
    outbox_pending: int
    device_feedbacks: int
    privacy: dict[str, Any]
    # Feedbacks the device answered without a report (the person's bound, issue 24).
    device_withheld: int = 0
    # The per-person guarantee beside the ledger (``PrivacyReport.per_person``).
    per_person: dict[str, Any] | None = None
    # The length of the task's next batch under its schedule (issue 22), as the shuffler says.
    next_batch: int | None = None

    def quiescent(self, batch_size: int) -> bool:
        """Nothing in flight: outbox empty, every formed batch acknowledged, fewer pending than
        the next batch takes (``batch_size`` if the shuffler does not say)."""
        return (
            self.outbox_pending == 0
            and self.pending < (self.next_batch or batch_size)
            and self.batches_formed == self.batches_acknowledged
            and self.batches_in_flight == 0
        )


async def snapshot(urls: dict[str, str], task: str, client: httpx.AsyncClient) -> Snapshot:
    dev, shf, prv = await asyncio.gather(
        client.get(f"{urls['device']}/v1/status"),
        client.get(f"{urls['shuffler']}/v1/status"),
        client.get(f"{urls['analyzer']}/v1/tasks/{task}/privacy"),
    )
    for name, resp in (("device", dev), ("shuffler", shf), ("analyzer", prv)):
        if resp.status_code != 200:
            raise DemoError(f"{name} status: {resp.status_code} {resp.text[:300]}")
    queue = next((q for q in shf.json()["tasks"] if q["task"] == task), None)
    if queue is None:
        raise DemoError(f"the shuffler does not know task {task}")
    p = prv.json()
    d = dev.json()
    return Snapshot(
        accepted=int(queue["accepted"]),
        pending=int(queue["pending"]),
        batches_formed=int(queue["batches_formed"]),
        batches_acknowledged=int(queue["batches_acknowledged"]),
        batches_in_flight=int(queue["batches_in_flight"]),
        counted=int(p["reports_counted"]),
        # Refused by the analyzer (invalid, duplicate, quarantined), and dropped by the shuffler
        # because the analyzer's Paillier key changed (nobody can decrypt them any more).
        refused=int(p.get("reports_refused", 0)) + int(queue.get("refused_stale_key", 0)),
        batches=int(p["batches"]),
        model_version=int(p["model_version"]),
        outbox_pending=int(d["outbox_pending"]),
        device_feedbacks=int(d["feedbacks"]),
        privacy=p["ledger"],
        next_batch=queue.get("next_batch_size"),
        device_withheld=int(d.get("withheld", 0)),
        per_person=p.get("per_person"),
    )


async def wait_quiescent(
    urls: dict[str, str], task: str, batch_size: int, timeout: float = 120.0,
    on_wait: Callable[[Snapshot], None] | None = None,
) -> Snapshot:
    """Poll until two consecutive snapshots are quiescent and equal in their counts."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    prev: Snapshot | None = None
    async with httpx.AsyncClient(timeout=10.0, verify=tls_context()) as client:
        while True:
            try:
                snap = await snapshot(urls, task, client)
            except httpx.TransportError:
                snap = None  # a service restarting: keep waiting
            if snap is not None:
                if on_wait is not None:
                    on_wait(snap)
                if snap.quiescent(batch_size) and prev is not None and _same(prev, snap):
                    return snap
                prev = snap if snap.quiescent(batch_size) else None
            if loop.time() > deadline:
                raise DemoError(
                    f"the services did not settle within {timeout:.0f}s (last: {snap})"
                )
            await asyncio.sleep(0.25)


def _same(a: Snapshot, b: Snapshot) -> bool:
    return (a.accepted, a.pending, a.counted, a.refused, a.batches) == (
        b.accepted, b.pending, b.counted, b.refused, b.batches)


def reconcile(sent: int, before: Snapshot, after: Snapshot) -> dict[str, Any]:
    """The spec §6 reconciliation for this run, and whether it holds.

    Accepted, counted, refused, batches and model versions are changes during the run; pending
    is what waits in the shuffler at the end. With services that were already running, reports
    left pending by earlier runs (``reports_pending_before``) may fill this run's batches, so the
    identity is  counted + refused + pending == accepted + pending_before  (pending_before = 0
    for fresh services, which is the spec's  counted + refused + pending == accepted).
    """
    rec: dict[str, Any] = {
        "feedbacks_sent": sent,
        "feedbacks_withheld": after.device_withheld - before.device_withheld,
        "reports_accepted": after.accepted - before.accepted,
        "reports_counted": after.counted - before.counted,
        "reports_refused": after.refused - before.refused,
        "reports_pending": after.pending,
        "reports_pending_before": before.pending,
        "batches": after.batches - before.batches,
        "model_versions": after.model_version - before.model_version,
    }
    problems = []
    if rec["reports_accepted"] + rec["feedbacks_withheld"] != sent:
        problems.append(
            f"reports_accepted ({rec['reports_accepted']}) + feedbacks_withheld "
            f"({rec['feedbacks_withheld']}) != feedbacks_sent ({sent})"
        )
    if rec["reports_counted"] + rec["reports_refused"] + rec["reports_pending"] != (
        rec["reports_accepted"] + rec["reports_pending_before"]
    ):
        problems.append(
            f"reports_counted ({rec['reports_counted']}) + reports_refused "
            f"({rec['reports_refused']}) + reports_pending ({rec['reports_pending']}) != "
            f"reports_accepted ({rec['reports_accepted']})"
            + (f" + reports_pending_before ({before.pending})" if before.pending else "")
        )
    rec["consistent"] = not problems
    rec["problems"] = problems
    return rec
