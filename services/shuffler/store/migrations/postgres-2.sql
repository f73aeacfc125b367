-- Issue 22: batch schedules (l_k = the length of batch k of a task, ``policies.schedule``).
-- shuffler_schedule: per task, the index of its next batch. Every replica that forms a batch
-- locks this row first (``PgShufflerStore._form``), so batch k's length is decided once, from
-- the committed count, by whichever replica forms it; it is never decreased (a dissolved
-- batch's index is not reused). idx: a batch's index k (NULL for batches formed before
-- schedules, all of one fixed length). refused_oversized: secure-sum reports refused at intake
-- because their noise share was sized for a longer batch than the task's next one.
CREATE TABLE shuffler_schedule (
    task TEXT PRIMARY KEY,
    next_batch BIGINT NOT NULL DEFAULT 0
);
INSERT INTO shuffler_schedule (task, next_batch)
    SELECT task, count(*) FROM shuffler_batches GROUP BY task;
ALTER TABLE shuffler_batches ADD COLUMN idx BIGINT;
ALTER TABLE shuffler_counters ADD COLUMN refused_oversized BIGINT NOT NULL DEFAULT 0;
