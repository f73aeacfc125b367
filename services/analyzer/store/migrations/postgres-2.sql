-- Issue 45: when the task's last batch was committed (epoch seconds; NULL: none since this
-- column was added). The status page's "last batch" reads it, so a restart does not blank it.
ALTER TABLE analyzer_tasks ADD COLUMN last_batch_at DOUBLE PRECISION;
