// Package fence writes to PostgreSQL only when the writer's fence is newer than
// the last one written there: the guard that makes a paused or taken-over worker
// harmless to what its idempotency key owns.
//
// A handler passes the fence of its attempt (consumer.FenceFromContext). The
// fence is counted per idempotency record: it grows with every claim or takeover
// of that record, so a worker that lost its claim holds a smaller fence than the
// one that took over, and its late write is refused with ErrStale.
//
// # What a fence can guard
//
// A fence guards a resource owned by its key: a row keyed by the idempotency key
// (the report for month M under the key "report:M", the charge row of payment P
// under P's key), and whatever else the attempt writes for that key in the same
// transaction. The pattern is one statement, to be copied into your own tables:
//
//	INSERT INTO reports (key, fence, body) VALUES ($1, $2, $3)
//	ON CONFLICT (key) DO UPDATE SET fence = EXCLUDED.fence, body = EXCLUDED.body
//	WHERE reports.fence < EXCLUDED.fence
//
// Zero rows affected means stale. Run it in the transaction that writes the rest
// of the key's rows and roll back on ErrStale: nothing of the stale attempt lands.
// Table is a ready-made key/value table of that shape; its methods take a
// database/sql *sql.DB, *sql.Tx or *sql.Conn (DB), or, through the Pgx methods, a
// pgx.Tx, *pgxpool.Pool or *pgx.Conn (PgxDB).
//
// # What a fence cannot guard
//
// A row that several keys write (an account balance that every deposit updates):
// each record counts its fences from 1, so the fences of two keys are not
// comparable, and a fence check on such a row would refuse the second deposit as
// stale. Shared rows need the key's completion recorded in the same transaction
// as the business writes (transactional completion), not a fence.
//
// Fences restart when a record expires: after the store's retention a key is new
// again and its first attempt carries fence 1, while the row its earlier run left
// keeps the old fence and refuses the write as stale. Keep records at least as
// long as a key can be delivered again, or delete the key's rows with its record.
package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrStale: a write carrying this fence or a newer one was already made; nothing
// was written.
var ErrStale = errors.New("fence: stale fence: a newer attempt has already written")

// DB is what Table needs from database/sql: *sql.DB, *sql.Tx and *sql.Conn have
// it. Pass the transaction that writes the key's other rows.
type DB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

var (
	_ DB = (*sql.DB)(nil)
	_ DB = (*sql.Tx)(nil)
	_ DB = (*sql.Conn)(nil)
)

// Table is a key/value table whose writes are guarded by the fence; each key is
// an idempotency key and its row is owned by that key. Name must be a plain SQL
// identifier.
type Table struct{ Name string }

var ident = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

func (t Table) check() error {
	if !ident.MatchString(t.Name) {
		return fmt.Errorf("fence: table name %q is not a plain SQL identifier: use letters, digits and _", t.Name)
	}
	return nil
}

// noDB reports a missing database: a nil interface or a nil pointer of a type
// the package names.
func noDB(db any) bool {
	switch v := db.(type) {
	case nil:
		return true
	case *sql.DB:
		return v == nil
	case *sql.Tx:
		return v == nil
	case *sql.Conn:
		return v == nil
	case *pgxpool.Pool:
		return v == nil
	case *pgx.Conn:
		return v == nil
	}
	return false
}

// Schema is the table's DDL:
//
//	CREATE TABLE IF NOT EXISTS <name> (
//	  key        text PRIMARY KEY,            -- the idempotency key that owns the row
//	  fence      bigint NOT NULL,             -- the fence of the last effective write
//	  value      bytea,
//	  writes     integer NOT NULL DEFAULT 1,  -- effective writes, for auditing
//	  updated_at timestamptz NOT NULL DEFAULT now())
func (t Table) Schema() string {
	return `CREATE TABLE IF NOT EXISTS ` + t.Name + ` (
  key        text PRIMARY KEY,
  fence      bigint NOT NULL,
  value      bytea,
  writes     integer NOT NULL DEFAULT 1,
  updated_at timestamptz NOT NULL DEFAULT now())`
}

func (t Table) writeSQL() string {
	return `INSERT INTO ` + t.Name + ` (key, fence, value) VALUES ($1, $2, $3)
ON CONFLICT (key) DO UPDATE SET fence = EXCLUDED.fence, value = EXCLUDED.value,
  writes = ` + t.Name + `.writes + 1, updated_at = now()
WHERE ` + t.Name + `.fence < EXCLUDED.fence`
}

func (t Table) readSQL() string {
	return `SELECT value, fence, writes FROM ` + t.Name + ` WHERE key = $1`
}

// written turns the rows a write affected into its result.
func written(key string, fence int64, rows int64, err error) error {
	switch {
	case err != nil:
		return fmt.Errorf("fence: write %q: %w", key, err)
	case rows == 0:
		return fmt.Errorf("%w: key %q, fence %d", ErrStale, key, fence)
	}
	return nil
}

// Create creates the table if it does not exist.
func (t Table) Create(ctx context.Context, db DB) error {
	if err := t.check(); err != nil {
		return err
	}
	if noDB(db) {
		return errors.New("fence: Create: nil database")
	}
	_, err := db.ExecContext(ctx, t.Schema())
	return err
}

// Write stores value at key if fence is larger than the fence of the last write
// there (or the key is new), and fails with ErrStale otherwise. In a transaction,
// a concurrent write of the same key waits for it, and is then judged against
// what it committed.
func (t Table) Write(ctx context.Context, db DB, key string, fence int64, value []byte) error {
	if err := t.check(); err != nil {
		return err
	}
	if noDB(db) {
		return errors.New("fence: Write: nil database")
	}
	res, err := db.ExecContext(ctx, t.writeSQL(), key, fence, value)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	return written(key, fence, n, err)
}

// Read returns the value at key, the fence of its last write and how many
// effective writes it had; found is false for a key never written.
func (t Table) Read(ctx context.Context, db DB, key string) (value []byte, fence int64, writes int, found bool, err error) {
	if err := t.check(); err != nil {
		return nil, 0, 0, false, err
	}
	if noDB(db) {
		return nil, 0, 0, false, errors.New("fence: Read: nil database")
	}
	err = db.QueryRowContext(ctx, t.readSQL(), key).Scan(&value, &fence, &writes)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, 0, 0, false, nil
	}
	if err != nil {
		return nil, 0, 0, false, fmt.Errorf("fence: read %q: %w", key, err)
	}
	return value, fence, writes, true, nil
}
