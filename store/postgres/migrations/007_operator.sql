-- The operator plane: a record's key (its bytes: a key may hold any UTF-8, NUL
-- too, which text refuses), so that a scan can list it (rows written before this
-- file have none: they are listed from their next claim on, and can be read and
-- changed by key meanwhile), and its operator notes as two arrays,
-- newest first (the note and its unix second), the newest 8 kept. The scan
-- index walks one scope's keys in order, a page at a time, from the last key of
-- the page before.
ALTER TABLE idemkit_records
    ADD COLUMN key     bytea,
    ADD COLUMN notes   text[]   NOT NULL DEFAULT '{}',
    ADD COLUMN note_at bigint[] NOT NULL DEFAULT '{}';
CREATE INDEX idemkit_records_scan ON idemkit_records (scope, key) WHERE key IS NOT NULL;
ALTER TABLE idemkit_records_by_time
    ADD COLUMN key     bytea,
    ADD COLUMN notes   text[]   NOT NULL DEFAULT '{}',
    ADD COLUMN note_at bigint[] NOT NULL DEFAULT '{}';
CREATE INDEX idemkit_records_by_time_scan ON idemkit_records_by_time (scope, key) WHERE key IS NOT NULL;
