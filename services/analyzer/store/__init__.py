"""The analyzer's durable state: the types and the ``Store`` protocol (``base``), and one module
per backend: ``sqlite`` (``AnalyzerStore``, the zero-setup default) and ``postgres``
(``PgAnalyzerStore``, one active analyzer per task; imported only when a store setting names
PostgreSQL, so psycopg is loaded only then)."""

from services.analyzer.store.base import (
    TASK_COUNTERS,
    BatchResult,
    Store,
    TaskRecord,
    totals,
)
from services.analyzer.store.sqlite import AnalyzerStore

__all__ = ["TASK_COUNTERS", "AnalyzerStore", "BatchResult", "Store", "TaskRecord", "totals"]
