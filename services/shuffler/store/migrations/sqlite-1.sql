
CREATE TABLE IF NOT EXISTS counters (
    task TEXT PRIMARY KEY,
    accepted INTEGER NOT NULL DEFAULT 0,
    duplicates INTEGER NOT NULL DEFAULT 0,
    batches_formed INTEGER NOT NULL DEFAULT 0,
    batches_acknowledged INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS seen (
    task TEXT NOT NULL,
    hash BLOB NOT NULL,
    PRIMARY KEY (task, hash)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS pending (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    task TEXT NOT NULL,
    key_id INTEGER NOT NULL,
    enc BLOB NOT NULL,
    ct BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS pending_by_task ON pending (task, seq);
CREATE TABLE IF NOT EXISTS batches (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    batch_id TEXT NOT NULL UNIQUE,
    task TEXT NOT NULL,
    size INTEGER NOT NULL,
    acked INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS unacked_by_task ON batches (task, acked, seq);
CREATE TABLE IF NOT EXISTS batch_reports (
    batch_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    key_id INTEGER NOT NULL,
    enc BLOB NOT NULL,
    ct BLOB NOT NULL,
    PRIMARY KEY (batch_id, position)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batch_sums (
    batch_id TEXT PRIMARY KEY,
    key_id INTEGER NOT NULL,
    count INTEGER NOT NULL,
    ct BLOB NOT NULL
) WITHOUT ROWID;
