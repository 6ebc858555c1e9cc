-- The time of a record's last write (a claim, a settlement, a renewal, a
-- release), in milliseconds of the server's clock; and the time-partitioned
-- record table, for NewPartitionedStore: the same columns, partitioned by that
-- time, so that expiry is dropping whole partitions (MaintainPartitions) instead
-- of deleting rows. Its primary key includes the partition key, as PostgreSQL
-- requires; one record per key is kept by the claim protocol (a claim of a new key
-- holds the key's advisory lock), not by the index.
ALTER TABLE idemkit_records ADD COLUMN written_ms bigint NOT NULL DEFAULT 0;
CREATE TABLE idemkit_records_by_time (
    key_hash   bytea    NOT NULL,
    scope      text     NOT NULL,
    state      text     NOT NULL,
    owner      text     NOT NULL DEFAULT '',
    fence      bigint   NOT NULL,
    attempts   int      NOT NULL,
    fp         bytea,
    lease_ms   bigint   NOT NULL DEFAULT 0,
    result     bytea,
    dropped    text     NOT NULL DEFAULT '',
    permanent  boolean  NOT NULL DEFAULT false,
    locked     boolean  NOT NULL DEFAULT false,
    created_ms bigint   NOT NULL,
    updated_ms bigint   NOT NULL,
    expires_ms bigint   NOT NULL,
    errs       text[]   NOT NULL DEFAULT '{}',
    err_at     bigint[] NOT NULL DEFAULT '{}',
    written_ms bigint   NOT NULL,
    PRIMARY KEY (key_hash, written_ms)
) PARTITION BY RANGE (written_ms);
