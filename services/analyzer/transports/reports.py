"""The analyzer's side of the ``reports`` transport: batches of exactly l HPKE reports.

``ReportsDecoder``: each report of a batch is decrypted, unpacked and turned into a row
(``Randomizer.from_bytes``, which also refuses a row its randomizer cannot produce); a report
that fails any of it is rejected alone; rows whose report id was already counted are dropped as
duplicates when fed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from fastapi import APIRouter
from pydantic import BaseModel

from privbandit.services.analyzer.transports.base import AnalyzerKeys, Delivery, Fed, TaskDecoder
from privbandit.services.common.web import report_json_bytes
from privbandit.shared.core.policies import Policy, randomizer_for
from privbandit.shared.core.policies.base import RowAdmitting
from privbandit.shared.core.randomizers.base import Randomizer
from privbandit.shared.crypto.hpke import CryptoError, ciphertext_length, row_length, unpack_report
from privbandit.shared.crypto.keystore import HpkeKeyStore
from privbandit.shared.protocol.messages import BatchUpload
from privbandit.shared.settings import TaskConfig

log = logging.getLogger(__name__)


def row_wire_bytes(config: TaskConfig) -> int:
    """Length of one report row's wire form (``Randomizer.to_bytes``) for a task."""
    return row_length(randomizer_for(config.policy))


def feed_rows(policy: Policy, rows: list[np.ndarray]) -> None:
    """Feed rows to the policy until all are consumed (exact policies consume rows up to their
    next model switch per call)."""
    if not rows:
        return
    stacked = np.stack(rows)
    consumed = 0
    while consumed < stacked.shape[0]:
        k = policy.ingest(stacked[consumed:])
        if k < 1:
            raise RuntimeError(f"policy {policy.algo} consumed no rows")
        consumed += k


@dataclass
class DecodedReports:
    batch_id: str
    ids: list[bytes]
    rows: list[np.ndarray]
    rejected: int

    @property
    def report_ids(self) -> Sequence[bytes]:
        return self.ids

    def feed(self, policy: Policy, known: set[bytes]) -> Fed:
        new_ids: list[bytes] = []
        new_rows: list[np.ndarray] = []
        for report_id, row in zip(self.ids, self.rows, strict=True):
            if report_id in known:
                continue
            known.add(report_id)  # also catches repeats within the batch and group
            new_ids.append(report_id)
            new_rows.append(row)
        feed_rows(policy, new_rows)
        return Fed(len(new_ids), len(self.ids) - len(new_ids), new_ids)


@dataclass
class ReportsDecoder(TaskDecoder):
    """Batches of exactly l HPKE reports, sealed to the analyzer for this task; ``row_bytes`` is
    the wire length of one report row."""

    keys: HpkeKeyStore
    randomizer: Randomizer
    row_bytes: int
    # A policy-level check of a decoded row (``MABPolicy.admit_row``: e.g. a Tsallis-INF
    # probability no published model gave); raises ValueError to reject the report alone. It
    # runs in the pipeline's worker thread, which is the only one that mutates the policy.
    check_row: Callable[[np.ndarray], None] | None = None
    report_level: ClassVar[bool] = True
    delivery: ClassVar[Delivery] = Delivery(
        BatchUpload, "batches of exactly l = {l} reports, got {n}",
        "it takes only report batches (POST /v1/tasks/{task}/batches)")

    @staticmethod
    def count(upload: BatchUpload) -> int:
        return len(upload.reports)

    def accept(self, upload: BaseModel) -> BatchUpload:
        return self.admit(upload)

    def weight(self, item: BatchUpload) -> int:
        # One decryption per report.
        return len(item.reports)

    def decode(self, item: BatchUpload) -> DecodedReports:
        task = self.config.id
        ids: list[bytes] = []
        rows: list[np.ndarray] = []
        rejected = 0
        for report in item.reports:
            try:
                plaintext = self.keys.open(task, report)
                report_id, row_bytes = unpack_report(plaintext, self.row_bytes)
                row = self.randomizer.from_bytes(row_bytes)
                if self.check_row is not None:
                    self.check_row(row)
                rows.append(row)
            except (CryptoError, ValueError) as exc:
                rejected += 1
                log.debug("task %s batch %s: rejected a report: %s", task, item.batch_id, exc)
                continue
            ids.append(report_id)
        return DecodedReports(item.batch_id, ids, rows, rejected)


class ReportsTransport:
    """``reports``: the shuffler forwards each batch of l HPKE reports as it is (shuffled)."""

    name = "reports"
    endpoint = "batches"
    upload: type[BaseModel] = BatchUpload
    summary = "One shuffled batch of exactly l reports from the shuffler; idempotent on batch id."
    key_files: dict[str, str] = {}

    def add_routes(self, router: APIRouter) -> None:
        """None: the HPKE config, which every transport needs, is the analyzer's own."""

    def open_keys(self, keys: AnalyzerKeys) -> None:
        """Only the HPKE key, which every analyzer has."""

    def decoder(self, config: TaskConfig, policy: Policy, keys: AnalyzerKeys) -> ReportsDecoder:
        return ReportsDecoder(config, keys.keys, policy.randomizer, row_wire_bytes(config),
                              check_row=policy.admit_row if isinstance(policy, RowAdmitting)
                              else None)

    def max_body(self, config: TaskConfig) -> int:
        """l reports of the task's exact ciphertext length."""
        return config.max_batch * report_json_bytes(ciphertext_length(row_wire_bytes(config)))
