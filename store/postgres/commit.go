package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// insertCompletionOrFail is the completion row InTx adds: a plain INSERT, so that a
// row already there fails it (unique_violation) and the transaction aborts before
// the COMMIT sent behind it can run.
const insertCompletionOrFail = `INSERT INTO idemkit_completions (key_hash, scope, fence, result, expires_at)
VALUES ($1, $2, $3, $4, now() + $5 * interval '1 microsecond')`

// uniqueViolation is PostgreSQL's code for a duplicate key.
const uniqueViolation = "23505"

// pgxTx is InTx's transaction. On a pool or a connection it is a transaction of a
// connection InTx holds (conn), and the completion row and COMMIT go to the server
// together, in one round trip: the business transaction without idemkit is BEGIN,
// its statements, COMMIT; with it, the same round trips. On any other Beginner (a
// transaction, whose Begin makes a savepoint) the row is one statement and the
// commit another.
type pgxTx struct {
	tx      pgx.Tx
	conn    *pgx.Conn // nil: the commit is tx.Commit
	release func()
}

func beginPgx(ctx context.Context, db Beginner, iso pgx.TxIsoLevel) (*pgxTx, error) {
	opts := pgx.TxOptions{IsoLevel: iso}
	switch db := db.(type) {
	case *pgxpool.Pool:
		c, err := db.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		tx, err := c.Conn().BeginTx(ctx, opts)
		if err != nil {
			c.Release()
			return nil, err
		}
		return &pgxTx{tx: tx, conn: c.Conn(), release: c.Release}, nil
	case *pgx.Conn:
		tx, err := db.BeginTx(ctx, opts)
		if err != nil {
			return nil, err
		}
		return &pgxTx{tx: tx, conn: db, release: func() {}}, nil
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, err
	}
	if iso != "" {
		if _, err := tx.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL "+string(iso)); err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("isolation: %w", err)
		}
	}
	return &pgxTx{tx: tx, release: func() {}}, nil
}

// rollback ends the transaction without its writes and gives the connection back.
func (t *pgxTx) rollback(ctx context.Context) {
	if t.conn == nil || t.conn.PgConn().TxStatus() != 'I' {
		_ = t.tx.Rollback(context.WithoutCancel(ctx))
	}
	t.release()
}

// commit adds the completion row (args of insertCompletionOrFail) and commits. It
// reports applied when the key's completion row was already there: the
// transaction is then rolled back.
func (t *pgxTx) commit(ctx context.Context, args ...any) (applied bool, err error) {
	if t.conn != nil && t.conn.PgConn().TxStatus() != 'T' {
		// The function ended the transaction itself (Commit, Rollback, a raw
		// COMMIT) or left it aborted: recording the completion now would record an
		// effect that may not be there.
		t.rollback(ctx)
		return false, errors.New("postgres: InTx: the function ended its transaction or left it failed (call neither Commit nor Rollback on it, and return the error of a failed statement): nothing was recorded")
	}
	if t.conn != nil {
		b := &pgx.Batch{}
		b.Queue(insertCompletionOrFail, args...)
		b.Queue("COMMIT")
		err = t.conn.SendBatch(ctx, b).Close()
	} else if _, err = t.tx.Exec(ctx, insertCompletionOrFail, args...); err == nil {
		err = t.tx.Commit(ctx)
	}
	if err == nil {
		t.release()
		return false, nil
	}
	t.rollback(ctx)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == uniqueViolation && pe.TableName == "idemkit_completions" {
		return true, nil
	}
	return false, err
}
