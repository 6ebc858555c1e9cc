// Package postgres keeps idempotency records in PostgreSQL (pgx v5), and records
// a key's completion inside the handler's own transaction so that a handler that
// writes to the same database has its effect exactly once.
//
// Schema: the package ships its tables as SQL files (migrations/*.sql, embedded)
// and creates them only when told to, by Migrate. Migrate applies the files in
// name order, once each, under a transaction-scoped advisory lock, and records
// what it applied in idemkit_schema_migrations, so running it at every start-up
// from many processes is safe.
package postgres
