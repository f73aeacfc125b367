
CREATE TABLE analyzer_tasks (
    task TEXT PRIMARY KEY,
    config TEXT NOT NULL,
    state TEXT NOT NULL,
    reports_counted BIGINT NOT NULL DEFAULT 0,
    rejected BIGINT NOT NULL DEFAULT 0,
    duplicates BIGINT NOT NULL DEFAULT 0,
    batches BIGINT NOT NULL DEFAULT 0,
    quarantined BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE analyzer_batches (
    task TEXT NOT NULL,
    batch_id TEXT NOT NULL,
    counted INTEGER NOT NULL,
    rejected INTEGER NOT NULL,
    duplicates INTEGER NOT NULL,
    model_version INTEGER NOT NULL,
    quarantined INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (task, batch_id)
);
CREATE TABLE analyzer_report_ids (
    task TEXT NOT NULL,
    report_id BYTEA NOT NULL,
    PRIMARY KEY (task, report_id)
);
