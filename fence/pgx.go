package fence

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PgxDB is what Table's Pgx methods need from pgx v5: pgx.Tx, *pgxpool.Pool and
// *pgx.Conn have it. Pass the transaction that writes the key's other rows.
type PgxDB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

var (
	_ PgxDB = pgx.Tx(nil)
	_ PgxDB = (*pgxpool.Pool)(nil)
	_ PgxDB = (*pgx.Conn)(nil)
)

// CreatePgx is Create over pgx.
func (t Table) CreatePgx(ctx context.Context, db PgxDB) error {
	if err := t.check(); err != nil {
		return err
	}
	if noDB(db) {
		return errors.New("fence: CreatePgx: nil database")
	}
	_, err := db.Exec(ctx, t.Schema())
	return err
}

// WritePgx is Write over pgx: it stores value at key if fence is larger than the
// fence of the last write there (or the key is new), and fails with ErrStale
// otherwise.
func (t Table) WritePgx(ctx context.Context, db PgxDB, key string, fence int64, value []byte) error {
	if err := t.check(); err != nil {
		return err
	}
	if noDB(db) {
		return errors.New("fence: WritePgx: nil database")
	}
	tag, err := db.Exec(ctx, t.writeSQL(), key, fence, value)
	return written(key, fence, tag.RowsAffected(), err)
}

// ReadPgx is Read over pgx: the value at key, the fence of its last write and how
// many effective writes it had; found is false for a key never written.
func (t Table) ReadPgx(ctx context.Context, db PgxDB, key string) (value []byte, fence int64, writes int, found bool, err error) {
	if err := t.check(); err != nil {
		return nil, 0, 0, false, err
	}
	if noDB(db) {
		return nil, 0, 0, false, errors.New("fence: ReadPgx: nil database")
	}
	err = db.QueryRow(ctx, t.readSQL(), key).Scan(&value, &fence, &writes)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, 0, 0, false, nil
	}
	if err != nil {
		return nil, 0, 0, false, fmt.Errorf("fence: read %q: %w", key, err)
	}
	return value, fence, writes, true, nil
}
