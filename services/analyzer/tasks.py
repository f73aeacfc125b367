"""One task on the analyzer: its configuration, policy, published model, counters and the
transport decoder and group committer its batches go through."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from privbandit.services.analyzer.feed import ModelFeed
from privbandit.services.analyzer.transports.base import Decoder, Item
from privbandit.services.common.group_commit import GroupCommitter
from privbandit.shared.core.accounting.ledger import PrivacyLedger
from privbandit.shared.core.policies import Policy
from privbandit.shared.core.policies.base import Eps0Scheduled
from privbandit.shared.protocol.messages import AnyModelMessage, BatchAck, TaskInfo
from privbandit.shared.settings import TaskConfig


def task_info(config: TaskConfig, policy: Policy | None = None) -> TaskInfo:
    """The task's public parameters (``GET /v1/tasks/{task}``). With its ``policy`` a task whose
    ε0 a central target sets per batch length also publishes ε0 for each length of its schedule,
    so that a device without the accountant (the browser library) randomises exactly as the
    Python device does."""
    eps0 = None
    if isinstance(policy, Eps0Scheduled):
        eps0 = {size: float(policy.eps0_for(size)) for size in config.schedule.distinct_sizes()}
    return TaskInfo(
        id=config.id,
        threat_model=config.threat_model,
        algo=config.policy.algo,
        d=None if config.multi_armed else config.policy.d,  # type: ignore[union-attr]  # MAB: no d
        K=config.K,
        batch_size=config.batch_size,
        aggregation=config.aggregation,
        secure_sum=config.secure_sum if config.aggregation == "secure-sum" else None,
        policy=config.policy.model_dump(mode="json"),
        eps0_by_batch_size=eps0,
        contributions=(None if config.contributions is None
                       else config.contributions.model_dump(mode="json")),
    )


@dataclass
class TaskRuntime:
    """One task: its policy (mutated only by the task's ingest pipeline, in its committer's
    worker thread) and counters (as committed)."""

    config: TaskConfig
    policy: Policy
    decoder: Decoder[Any]
    published: AnyModelMessage
    feed: ModelFeed
    reports_counted: int = 0
    rejected: int = 0
    duplicates: int = 0
    # Reports refused with their whole (Paillier) batch.
    quarantined: int = 0
    batches: int = 0
    # When the task's last batch was committed (epoch seconds, as stored with it: a restart
    # keeps it; None: none yet). The status page's "last batch".
    last_batch_at: float | None = None
    ledger_cache: PrivacyLedger | None = None
    person_cache: dict[str, Any] | None = None  # the per-person figures (``runtime.person``)
    # Coalesces the task's batches into group commits; set by ``AnalyzerRuntime.start``.
    committer: GroupCommitter[Item, BatchAck] | None = None
    # ``policy.skipped`` as last exported to the ``updates_skipped`` metric (not a committed
    # count: the policy's own counter is, inside its saved state).
    skipped: int = 0

    # (published model, its JSON): serialised once per publication, not once per GET.
    _body: tuple[AnyModelMessage, bytes] | None = field(default=None, repr=False)

    _info: TaskInfo | None = field(default=None, repr=False)

    @property
    def id(self) -> str:
        return self.config.id

    def info(self) -> TaskInfo:
        """``task_info``, made once: the ε0 table of a scheduled task takes the accountant's
        search (``policy.eps0_for`` reads only the config, never the state the committer's
        thread mutates)."""
        if self._info is None:
            self._info = task_info(self.config, self.policy)
        return self._info

    @property
    def etag(self) -> str:
        """The published model's strong ETag: its version, quoted (RFC 9110 §8.8.3)."""
        return f'"{self.published.version}"'

    def published_json(self) -> bytes:
        """``published`` as JSON, computed on the first read after each publication (the
        model is replaced, never mutated, so identity tells a new publication)."""
        cached = self._body
        if cached is None or cached[0] is not self.published:
            cached = (self.published, self.published.model_dump_json().encode())
            self._body = cached
        return cached[1]

    @property
    def reports_refused(self) -> int:
        """Reports delivered but not counted: rejected, duplicates and quarantined."""
        return self.rejected + self.duplicates + self.quarantined
