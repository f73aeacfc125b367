"""The shuffler's durable state: the types and the ``Store`` protocol (``base``), and one module
per backend: ``sqlite`` (``ShufflerStore``, one process, the zero-setup default) and ``postgres``
(``PgShufflerStore``, N replicas on one database; imported only when a store setting names
PostgreSQL, so psycopg is loaded only then)."""

from privbandit.services.shuffler.store.base import (
    AcceptResult,
    Batch,
    SecureBatch,
    StaleKeyRefusal,
    Store,
    TaskCounts,
    Upload,
    report_hash,
    tag_bytes,
    tag_from_bytes,
    tag_hash,
)
from privbandit.services.shuffler.store.sqlite import ShufflerStore

__all__ = [
    "AcceptResult",
    "Batch",
    "SecureBatch",
    "ShufflerStore",
    "StaleKeyRefusal",
    "Store",
    "TaskCounts",
    "Upload",
    "report_hash",
    "tag_bytes",
    "tag_from_bytes",
    "tag_hash",
]
