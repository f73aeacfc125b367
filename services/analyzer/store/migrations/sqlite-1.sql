
CREATE TABLE IF NOT EXISTS tasks (
    task TEXT PRIMARY KEY,
    config TEXT NOT NULL,
    state TEXT NOT NULL,
    reports_counted INTEGER NOT NULL DEFAULT 0,
    rejected INTEGER NOT NULL DEFAULT 0,
    duplicates INTEGER NOT NULL DEFAULT 0,
    batches INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS batches (
    task TEXT NOT NULL,
    batch_id TEXT NOT NULL,
    counted INTEGER NOT NULL,
    rejected INTEGER NOT NULL,
    duplicates INTEGER NOT NULL,
    model_version INTEGER NOT NULL,
    PRIMARY KEY (task, batch_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS report_ids (
    task TEXT NOT NULL,
    report_id BLOB NOT NULL,
    PRIMARY KEY (task, report_id)
) WITHOUT ROWID;
