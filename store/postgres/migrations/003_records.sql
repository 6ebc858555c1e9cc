-- The PostgreSQL Store's records: one row per key, the primary key SHA-256 of the
-- scope and the key (raw keys are not stored). Times are milliseconds of the
-- database server's clock; a row whose expires_ms has passed reads as absent, and
-- Reap deletes it.
CREATE TABLE idemkit_records (
    key_hash   bytea   PRIMARY KEY,
    scope      text    NOT NULL,
    state      text    NOT NULL,
    owner      text    NOT NULL DEFAULT '',
    fence      bigint  NOT NULL,
    attempts   int     NOT NULL,
    fp         bytea,
    lease_ms   bigint  NOT NULL DEFAULT 0,
    result     bytea,
    dropped    text    NOT NULL DEFAULT '',
    history    jsonb   NOT NULL DEFAULT '[]',
    permanent  boolean NOT NULL DEFAULT false,
    locked     boolean NOT NULL DEFAULT false,
    created_ms bigint  NOT NULL,
    updated_ms bigint  NOT NULL,
    expires_ms bigint  NOT NULL
);
CREATE INDEX idemkit_records_expires ON idemkit_records (expires_ms);
