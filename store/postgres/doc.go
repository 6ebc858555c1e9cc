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
// statement to it, an INSERT of the key's completion row (primary key SHA-256 of
// scope and key; the raw key is not stored; the result is kept as JSON). On a
// pool or a connection, InTx sends that INSERT and the COMMIT to the server
// together, so the transaction keeps its round trips: a row already there fails
// the INSERT, and the COMMIT behind it does not run. The business writes and the
// completion commit together or not at
// all. When the row is already there (an earlier attempt committed and its worker
// died before the store recorded the completion, or another owner committed
// first), the transaction is rolled back with the function's writes and the stored
// result comes back with consumer.AlreadyApplied: the delivery ends DUPLICATE with
// it. Any store can do the claims: Redis for speed and leases with PostgreSQL for
// the truth, or the Store below alone. Effects outside the transaction are still
// at least once; Reap deletes completion rows past WithCompletionRetention (7 days)
// in bounded batches.
//
// A key whose attempts run out while its effect committed (its last attempt
// committed with InTx and died before the store recorded it) is not failed: the
// Store reads the completion table in the claim that would report the attempts
// used up, completes the record with the committed result, and the delivery ends
// DUPLICATE with it. A store that keeps its records elsewhere finds the completions
// through Completions (consumer.WithCompletions(postgres.Completions(pool))).
//
// # The Store
//
// NewStore is a consumer.Store in PostgreSQL with the Redis store's semantics:
// leases and retention on the database server's clock (clock_timestamp()), owner
// compare-and-set on every transition, fence and attempts, fingerprint conflicts,
// the last errors kept, and the same answers to calls sent again after a lost
// reply. Records live in idemkit_records, keyed by SHA-256 of scope and key (the
// key itself is kept beside it, for the operator's scan).
// Claims are not attempts: a started record keeps whether its claim is counted
// (sent with consumer.Claim.Start, or marked so since by its owner), and a
// takeover charges an attempt, or exhausts the key on the last one, only for a
// counted claim; an uncounted claim taken over keeps its attempt number.
// Every call is one SQL statement over arrays of keys, in its own implicit
// transaction (statements.go): new keys are claimed by a plain INSERT ... ON
// CONFLICT DO NOTHING; keys with a row by a second statement that locks their rows in
// key order (so that batches never deadlock), decides each from its row and
// writes it back; settlements, renewals and releases are owner compare-and-set
// UPDATEs. A batch that names a key twice is sent as several statements, in
// order. The statements are written for READ COMMITTED, PostgreSQL's default:
// under a stricter default_transaction_isolation they stay correct but meet more
// serialization failures (retryable errors) when keys are contended. An expired row reads as absent; Reap deletes both tables'
// expired rows.
//
// # The operator plane
//
// Both stores implement admin.Store, so admin.Inspector and the idemkit CLI list,
// inspect, unstick, forget and rerun their records, in any scope of the table,
// with the Redis store's semantics. Each change (ChangeRecord) is one statement
// that locks the live row, checks the fence the operator saw and the state, and
// changes the row; its note ("<op> by <actor>: <reason>") goes first in the
// record's notes (the newest 8), which every later transition keeps, completion
// included. A scan (ScanRecords) is paged by a keyset cursor, the last scope and
// key of the page before: each page is one walk of the (scope, key) index from
// there, at most ScanQuery.Count rows, never an offset and never a sort. Rows
// written before migration 007 (which added the key) are listed from their next
// claim on; PeekRecords and ChangeRecord reach them by key meanwhile.
//
// # Time-partitioned records
//
// NewPartitionedStore keeps the records in idemkit_records_by_time, partitioned
// by the time of each record's last write, for volumes where deleting expired
// rows (and vacuuming after them) costs too much: MaintainPartitions makes the
// windows ahead and drops a partition once every record in it has expired (its
// window ended more than the stores' lease + retention ago), at start-up and then
// at least once a window. PostgreSQL enforces a unique key on a partitioned table
// only when it includes the partition key, so the index cannot keep one record
// per key: a claim there holds its keys' advisory locks (BEGIN, the locks, the
// claim statement and COMMIT sent together, one round trip) and so finds the row
// of any claim of the same key before it. A write in a later window than the
// row's moves the row to that window's partition, so a partition only ever holds
// rows last written in its window, which is what makes dropping it safe.
//
// Schema: the package ships its tables as SQL files (migrations/*.sql, embedded)
// and creates them only when told to, by Migrate. Migrate applies the files in
// name order, once each, under a transaction-scoped advisory lock, and records
// what it applied in idemkit_schema_migrations, so running it at every start-up
// from many processes is safe. Until the tables are there (or while a column of a
// later file is missing), every Store call and every InTx or InSQLTx completion
// fails with an error matching ErrNotMigrated that names the table and says to
// run Migrate. It is a store outage, not a failed attempt: the claim is given back
// without counting an attempt, so the adapters retry the message and dead-letter
// nothing, and each message runs once after Migrate. Check (pgx), CheckSQL
// (database/sql) and Store.Check find a missing migration at start-up or in a
// readiness probe; a Store makes the same check before its first call.
package postgres
