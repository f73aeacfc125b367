"""Where the analyzer keeps its models, counters and the ids it has counted. ``base`` holds
what both backends share; ``AnalyzerStore`` (``sqlite``) is the default, ``PgAnalyzerStore``
(``postgres``) lets a standby take over a task (it is not imported here: psycopg loads only for
a postgresql:// store setting)."""

from privbandit.services.analyzer.store.base import (
    TASK_COUNTERS,
    BatchResult,
    Store,
    TaskRecord,
    totals,
)
from privbandit.services.analyzer.store.sqlite import AnalyzerStore

__all__ = ["TASK_COUNTERS", "AnalyzerStore", "BatchResult", "Store", "TaskRecord", "totals"]
