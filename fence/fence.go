// Package fence writes to PostgreSQL (or any database/sql store with the same
// SQL) only when the writer's fence is newer than the last one: the guard that
// makes a paused or taken-over worker harmless. A handler passes the fence of its
// attempt (consumer.FenceFromContext), which grows with every claim or takeover
// of the record; a worker that lost its claim holds a smaller fence and its write
// is refused with ErrStale.
//
// The pattern is one statement, to be copied into your own tables:
//
//	UPDATE accounts SET balance = $2, fence = $3 WHERE id = $1 AND fence < $3
//
// Table is a ready-made key/value table of that shape.
package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
)

// ErrStale: a write carrying this fence or a newer one was already made; nothing
// was written.
var ErrStale = errors.New("fence: stale fence: a newer attempt has already written")

// Table is a key/value table whose writes are guarded by the fence. Name must be
// a plain SQL identifier.
type Table struct{ Name string }

var ident = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

func (t Table) check() error {
	if !ident.MatchString(t.Name) {
		return fmt.Errorf("fence: table name %q is not a plain SQL identifier", t.Name)
	}
	return nil
}

// Schema is the table's DDL:
//
//	CREATE TABLE IF NOT EXISTS <name> (
//	  key        text PRIMARY KEY,
//	  fence      bigint NOT NULL,            -- the fence of the last effective write
//	  value      bytea,
//	  writes     integer NOT NULL DEFAULT 1, -- effective writes, for auditing
//	  updated_at timestamptz NOT NULL DEFAULT now())
func (t Table) Schema() string {
	return `CREATE TABLE IF NOT EXISTS ` + t.Name + ` (
  key        text PRIMARY KEY,
  fence      bigint NOT NULL,
  value      bytea,
  writes     integer NOT NULL DEFAULT 1,
  updated_at timestamptz NOT NULL DEFAULT now())`
}

// Create creates the table if it does not exist.
func (t Table) Create(ctx context.Context, db *sql.DB) error {
	if err := t.check(); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, t.Schema())
	return err
}

// Write stores value at key if fence is larger than the fence of the last write
// there (or the key is new), and fails with ErrStale otherwise.
func (t Table) Write(ctx context.Context, db *sql.DB, key string, fence int64, value []byte) error {
	if err := t.check(); err != nil {
		return err
	}
	res, err := db.ExecContext(ctx, `INSERT INTO `+t.Name+` (key, fence, value) VALUES ($1, $2, $3)
ON CONFLICT (key) DO UPDATE SET fence = EXCLUDED.fence, value = EXCLUDED.value,
  writes = `+t.Name+`.writes + 1, updated_at = now()
WHERE `+t.Name+`.fence < EXCLUDED.fence`, key, fence, value)
	if err != nil {
		return fmt.Errorf("fence: write %q: %w", key, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("fence: write %q: %w", key, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: key %q, fence %d", ErrStale, key, fence)
	}
	return nil
}

// Read returns the value at key, the fence of its last write and how many
// effective writes it had; found is false for a key never written.
func (t Table) Read(ctx context.Context, db *sql.DB, key string) (value []byte, fence int64, writes int, found bool, err error) {
	if err := t.check(); err != nil {
		return nil, 0, 0, false, err
	}
	err = db.QueryRowContext(ctx, `SELECT value, fence, writes FROM `+t.Name+` WHERE key = $1`, key).Scan(&value, &fence, &writes)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, 0, 0, false, nil
	}
	return value, fence, writes, err == nil, err
}
