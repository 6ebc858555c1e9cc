-- Transactional completion: one row per completed key, written by InTx/InSQLTx in
-- the handler's own transaction, beside its business writes. The primary key is
-- SHA-256 of the scope and the key, so a stale owner's commit after another's
-- fails on it and is rolled back with its writes.
CREATE TABLE idemkit_completions (
    key_hash     bytea       PRIMARY KEY,
    scope        text        NOT NULL,
    fence        bigint      NOT NULL,
    result       bytea,
    completed_at timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);
CREATE INDEX idemkit_completions_expires ON idemkit_completions (expires_at);
