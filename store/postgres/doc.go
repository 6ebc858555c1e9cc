// Package postgres keeps idempotency records in PostgreSQL (pgx v5), and records
// a key's completion inside the handler's own transaction so that a handler that
// writes to the same database has its effect exactly once.
//
// # Transactional completion
//
// InTx (pgx) and InSQLTx (database/sql) are called from inside a handler (the
// function given to ExecuteIdempotently, ExecuteBatch, a Pipeline, the Kafka
// adapter or the RabbitMQ worker): they take the key, scope and fence from the
// handler's context, run the given function in a transaction, and add one
// statement to it, an INSERT ... ON CONFLICT DO NOTHING of the key's completion row
// (primary key SHA-256 of scope and key; the raw key is not stored; the result is
// kept as JSON). The business writes and the completion commit together or not at
// all. When the row is already there (an earlier attempt committed and its worker
// died before the store recorded the completion, or another owner committed
// first), the transaction is rolled back with the function's writes and the stored
// result comes back with consumer.AlreadyApplied: the delivery ends DUPLICATE with
// it. Any store can do the claims: Redis for speed and leases with PostgreSQL for
// the truth, or the Store below alone. Effects outside the transaction are still
// at least once; Reap deletes completion rows past WithCompletionRetention (7 days)
// in bounded batches.
//
// # The Store
//
// NewStore is a consumer.Store in PostgreSQL with the Redis store's semantics:
// leases and retention on the database server's clock (clock_timestamp()), owner
// compare-and-set on every transition, fence and attempts, fingerprint conflicts,
// the last errors kept, and the same answers to calls sent again after a lost
// reply. Records live in idemkit_records, keyed by SHA-256 of scope and key. A
// batch of claims or settlements is one transaction: the keys' transaction-scoped
// advisory locks taken in one statement in a fixed order (so that batches never
// deadlock), one read of their rows, one upsert of every row over unnest arrays,
// and the commit. An expired row reads as absent; Reap deletes both tables'
// expired rows. Time-partitioned tables are not offered yet: PostgreSQL enforces a
// unique key on a partitioned table only when the key includes the partition key,
// and a claim knows its key but not the day its record was created, so partitions
// by time cannot by themselves keep one record per key; a partitioned variant needs
// a claim protocol of its own (for example, partitions by expiry day with the key's
// current partition kept in a small unpartitioned index table). Until then expiry
// is a bounded delete, and the table stays as large as the retention's traffic.
//
// Schema: the package ships its tables as SQL files (migrations/*.sql, embedded)
// and creates them only when told to, by Migrate. Migrate applies the files in
// name order, once each, under a transaction-scoped advisory lock, and records
// what it applied in idemkit_schema_migrations, so running it at every start-up
// from many processes is safe.
package postgres
