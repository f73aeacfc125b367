
CREATE TABLE shuffler_replicas (
    id TEXT PRIMARY KEY,
    started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    seen_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE shuffler_counters (
    task TEXT NOT NULL,
    shard TEXT NOT NULL,
    accepted BIGINT NOT NULL DEFAULT 0,
    duplicates BIGINT NOT NULL DEFAULT 0,
    batches_formed BIGINT NOT NULL DEFAULT 0,
    batches_acknowledged BIGINT NOT NULL DEFAULT 0,
    reports_acknowledged BIGINT NOT NULL DEFAULT 0,
    refused_stale_key BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (task, shard)
);
CREATE TABLE shuffler_seen (
    task TEXT NOT NULL,
    hash BYTEA NOT NULL,
    PRIMARY KEY (task, hash)
);
CREATE TABLE shuffler_pending (
    seq BIGSERIAL PRIMARY KEY,
    task TEXT NOT NULL,
    key_id INTEGER NOT NULL,
    enc BYTEA NOT NULL,
    ct BYTEA NOT NULL,
    tag BYTEA
);
CREATE INDEX shuffler_pending_by_task ON shuffler_pending (task, seq);
CREATE TABLE shuffler_batches (
    seq BIGSERIAL PRIMARY KEY,
    batch_id TEXT NOT NULL UNIQUE,
    task TEXT NOT NULL,
    size INTEGER NOT NULL,
    acked BOOLEAN NOT NULL DEFAULT false,
    owner TEXT
);
CREATE INDEX shuffler_unacked_by_task ON shuffler_batches (task, seq) WHERE NOT acked;
CREATE TABLE shuffler_batch_reports (
    batch_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    key_id INTEGER NOT NULL,
    enc BYTEA NOT NULL,
    ct BYTEA NOT NULL,
    tag BYTEA,
    PRIMARY KEY (batch_id, position)
);
CREATE TABLE shuffler_batch_sums (
    batch_id TEXT PRIMARY KEY,
    key_id INTEGER NOT NULL,
    count INTEGER NOT NULL,
    ct BYTEA NOT NULL,
    members TEXT
);
