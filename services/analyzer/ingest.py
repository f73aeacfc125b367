"""The analyzer's one ingest pipeline, for a group of batches of one task (both transports):

    replay check → decode → feed the policy → commit (or roll back) → counters → acknowledge

It is the ``commit`` of the task's ``GroupCommitter``: it runs in a worker thread, one group at
a time per task, so a task's policy is only ever mutated here. The transport is the task's
``Decoder`` (``services.analyzer.transports``).

- Replay: a batch id already committed, or repeated within the group, is acknowledged as
  ``replayed`` and counts nothing. Only a decoded batch claims its id within the group, so a
  refused batch may be re-sent (and re-refused).
- A batch its decoder refuses (``BatchRefused``: the deployment disagrees, e.g. on l or a key)
  changes no state, its id stays unprocessed, and its outcome is that exception alone: the rest
  of the group still commits.
- A batch that cannot be counted for what it holds is acknowledged all the same: its bad
  reports are rejected alone, or (Paillier) the whole batch is quarantined — its id recorded,
  nothing fed, its reports counted as refused, ``BatchAck.quarantined`` set — so no report can
  make the shuffler re-send a batch forever.
- The policy never fails a batch on linear algebra: it skips an update it cannot compute and
  counts it (``Policy.skipped``, exported as ``updates_skipped``).
- The batch ids, their new report ids, the counters and the policy state after the group are
  written in ONE transaction. If anything fails before that commit, the policy is restored, so
  memory never runs ahead of disk, and the exception fails the whole group.

Readers only see ``TaskRuntime.published``, replaced on the event loop after the group
(``AnalyzerRuntime.sync_published``), so no client observes a model that is not on disk.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from privbandit.services.analyzer.errors import BatchRefused
from privbandit.services.analyzer.metrics import AnalyzerMetrics
from privbandit.services.analyzer.store import BatchResult, Store
from privbandit.services.analyzer.tasks import TaskRuntime
from privbandit.services.analyzer.transports.base import Decoded, Item
from privbandit.shared.protocol.messages import BatchAck

# Bounds on one group commit: batches waiting for the same task are ingested together (one fsync
# for all of them), which matters for pass-through tasks where every report is a batch.
MAX_GROUP_BATCHES = 256
MAX_GROUP_REPORTS = 20_000

Outcome = BatchAck | BatchRefused


class IngestPipeline:
    """The pipeline of one task."""

    def __init__(self, rt: TaskRuntime, store: Store, metrics: AnalyzerMetrics) -> None:
        self.rt = rt
        self.store = store
        self.metrics = metrics

    def weight(self, item: Item) -> int:
        """An item's share of ``MAX_GROUP_REPORTS``."""
        return self.rt.decoder.weight(item)

    def __call__(self, items: Sequence[Item]) -> list[Outcome]:
        """Ingest one group; one outcome per item, in order."""
        started = time.perf_counter()
        rt, decoder = self.rt, self.rt.decoder
        committed = self.store.processed_batches(rt.id, [item.batch_id for item in items])

        # Replay check and decode (the CPU-heavy part; nothing is fed yet).
        outcomes: list[Outcome | None] = [None] * len(items)
        replayed: list[int] = []
        claimed: set[str] = set()
        decoded: list[tuple[int, Decoded]] = []
        for i, item in enumerate(items):
            if item.batch_id in committed or item.batch_id in claimed:
                replayed.append(i)
                continue
            try:
                batch = decoder.decode(item)
            except BatchRefused as exc:
                outcomes[i] = exc
                continue
            claimed.add(item.batch_id)
            decoded.append((i, batch))

        results = self._feed_and_commit(decoded)
        self._count(results, len(replayed), sum(o is not None for o in outcomes), started)

        version = rt.policy.model.version
        for i in replayed:
            outcomes[i] = BatchAck(
                batch_id=items[i].batch_id, replayed=True, counted=0, rejected=0, duplicates=0,
                model_version=version,
            )
        for i, r in results:
            outcomes[i] = BatchAck(
                batch_id=r.batch_id, replayed=False, counted=r.counted,
                rejected=r.rejected + r.quarantined, duplicates=r.duplicates,
                model_version=r.model_version, quarantined=r.quarantined > 0,
            )
        done = [o for o in outcomes if o is not None]
        assert len(done) == len(items)
        return done

    def _feed_and_commit(
        self, decoded: list[tuple[int, Decoded]]
    ) -> list[tuple[int, BatchResult]]:
        """Feed the decoded batches in order and commit them in one transaction; on any failure
        restore the policy and re-raise."""
        rt, policy = self.rt, self.rt.policy
        ids = [rid for _, batch in decoded for rid in batch.report_ids]
        known = self.store.known_report_ids(rt.id, ids) if ids else set()
        before = policy.get_state()
        results: list[tuple[int, BatchResult]] = []
        records: list[tuple[BatchResult, list[bytes]]] = []
        try:
            for i, batch in decoded:
                fed = batch.feed(policy, known)
                result = BatchResult(
                    batch_id=batch.batch_id, counted=fed.counted, rejected=batch.rejected,
                    duplicates=fed.duplicates, model_version=policy.model.version,
                    quarantined=fed.quarantined,
                )
                results.append((i, result))
                records.append((result, fed.new_ids))
            if records:
                at = time.time()
                self.store.commit_batches(rt.id, records, policy.get_state(), at)
                rt.last_batch_at = at  # as committed (``_count`` runs after the commit)
        except BaseException:
            policy.set_state(before)
            raise
        return results

    def _count(
        self, results: list[tuple[int, BatchResult]], replayed: int, refused: int,
        started: float,
    ) -> None:
        """The task's counters (as committed) and the ingest metrics."""
        rt, m, task = self.rt, self.metrics, self.rt.id
        report_level = rt.decoder.report_level
        for _, r in results:
            rt.reports_counted += r.counted
            rt.rejected += r.rejected
            rt.duplicates += r.duplicates
            rt.quarantined += r.quarantined
            rt.batches += 1
            m.batches.labels(task, "quarantined" if r.quarantined else "processed").inc()
            m.reports_counted.labels(task).inc(r.counted)
            if report_level:
                m.reports_rejected.labels(task).inc(r.rejected)
                m.reports_duplicate.labels(task).inc(r.duplicates)
            else:
                m.reports_quarantined.labels(task).inc(r.quarantined)
        skipped = rt.policy.skipped
        if skipped > rt.skipped:
            m.updates_skipped.labels(task).inc(skipped - rt.skipped)
            rt.skipped = skipped
        if refused:
            m.batches.labels(task, "refused").inc(refused)
        if replayed:
            m.batches.labels(task, "replayed").inc(replayed)
        if results:
            m.ingest_seconds.labels(task).observe(time.perf_counter() - started)
            m.group_batches.labels(task).observe(len(results))
