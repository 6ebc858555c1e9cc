package postgres

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/typednil"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultCompletionRetention is how long a completion row is kept by default.
const DefaultCompletionRetention = 7 * 24 * time.Hour

// TxOption configures InTx and InSQLTx. Every option states its default.
type TxOption interface{ applyTx(*txConfig) }

type txOptFunc func(*txConfig)

func (f txOptFunc) applyTx(c *txConfig) { f(c) }

type txConfig struct {
	retention time.Duration
	isolation pgx.TxIsoLevel
}

// WithCompletionRetention sets how long a completion row is kept (Reap deletes it
// after). Keep it at least the store's retention: while the row is there, a
// delivery of its key is answered from it even when the store's record is gone.
// Default 7 days.
func WithCompletionRetention(d time.Duration) TxOption {
	return txOptFunc(func(c *txConfig) { c.retention = d })
}

// WithIsolation sets the transaction's isolation level. Default: the database's
// (read committed).
func WithIsolation(level pgx.TxIsoLevel) TxOption {
	return txOptFunc(func(c *txConfig) { c.isolation = level })
}

func txSettings(opts []TxOption) (txConfig, error) {
	c := txConfig{retention: DefaultCompletionRetention}
	for _, o := range opts {
		if o == nil {
			return c, errors.New("postgres: nil option")
		}
		o.applyTx(&c)
	}
	if c.retention <= 0 {
		return c, fmt.Errorf("postgres: WithCompletionRetention(%v): give a positive duration", c.retention)
	}
	return c, nil
}

// keyHash is the completion row's primary key: SHA-256 of the scope, a zero byte
// and the key. Raw keys are not stored.
func keyHash(scope string, key consumer.Key) []byte {
	h := sha256.New()
	h.Write([]byte(scope))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return h.Sum(nil)
}

const insertCompletion = `INSERT INTO idemkit_completions (key_hash, scope, fence, result, expires_at)
VALUES ($1, $2, $3, $4, now() + $5 * interval '1 microsecond')
ON CONFLICT (key_hash) DO NOTHING`

const selectCompletion = `SELECT result FROM idemkit_completions WHERE key_hash = $1`

// SQLSTATEs InTx and InSQLTx tell apart.
const (
	serializationFailure = "40001"
	deadlockDetected     = "40P01"
)

// InTx runs fn in a transaction of db and records the completion of the key whose
// handler calls it in the same transaction, with one more statement: the business
// writes fn makes and the completion commit together or not at all. Call it from
// a handler (ExecuteIdempotently, ExecuteBatch, a Pipeline, the Kafka adapter, the
// RabbitMQ worker): it takes the key, scope and fence from ctx (consumer.Info).
//
//   - fn's error rolls the transaction back and is returned as is.
//   - When the key's completion is already committed (an earlier attempt committed
//     and crashed before the store recorded it, or another owner committed first),
//     the transaction is rolled back, fn's writes with it, and InTx returns the
//     stored result with consumer.AlreadyApplied: the execution ends DUPLICATE with
//     that result and records it in the store.
//   - A serialization failure or deadlock is returned as a retryable error.
//
// T is stored as JSON. The table is made by Migrate; without it (or without a
// column of a later migration) InTx rolls the transaction back and returns a store
// outage that matches ErrNotMigrated and says to run Migrate: the claim is given
// back without counting an attempt, so adapters retry the message and dead-letter
// nothing until the table is there. Check finds it at start-up.
func InTx[T any](ctx context.Context, db Beginner, fn func(ctx context.Context, tx pgx.Tx) (T, error), opts ...TxOption) (T, error) {
	var zero T
	cfg, err := txSettings(opts)
	if err != nil {
		return zero, err
	}
	if db == nil || typednil.Is(db) {
		return zero, errors.New("postgres: InTx: nil database")
	}
	if fn == nil {
		return zero, errors.New("postgres: InTx: nil function")
	}
	info, ok := consumer.InfoFromContext(ctx)
	if !ok {
		return zero, errors.New("postgres: InTx runs inside an idemkit handler (its context names the key): call it from the function you give ExecuteIdempotently or an adapter")
	}
	t, err := beginPgx(ctx, db, cfg.isolation)
	if err != nil {
		return zero, txError(fmt.Errorf("begin: %w", err))
	}
	v, err := callTx(ctx, t, fn)
	if err != nil {
		t.rollback(ctx)
		return zero, err
	}
	result, err := json.Marshal(v)
	if err != nil {
		t.rollback(ctx)
		return zero, consumer.Permanent(fmt.Errorf("postgres: the result cannot be stored as JSON: %w", err))
	}
	h := keyHash(info.Scope, info.Key)
	applied, err := t.commit(ctx, h, info.Scope, info.Fence, result, cfg.retention.Microseconds())
	switch {
	case applied:
		return storedPgx[T](ctx, db, h)
	case err != nil:
		return zero, txError(err)
	}
	return v, nil
}

// callTx runs fn in t; a panic in fn rolls t back (giving a pool its connection)
// before it goes on up to the handler's caller, which recovers it.
func callTx[T any](ctx context.Context, t *pgxTx, fn func(ctx context.Context, tx pgx.Tx) (T, error)) (T, error) {
	defer func() {
		if p := recover(); p != nil {
			t.rollback(ctx)
			panic(p)
		}
	}()
	return fn(ctx, t.tx)
}

// storedPgx reads the committed completion of h and answers with it.
func storedPgx[T any](ctx context.Context, db Beginner, h []byte) (T, error) {
	var zero T
	q, ok := db.(interface {
		QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	})
	if !ok {
		tx, err := db.Begin(ctx)
		if err != nil {
			return zero, txError(err)
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		q = tx
	}
	var data []byte
	if err := q.QueryRow(ctx, selectCompletion, h).Scan(&data); err != nil {
		return zero, txError(err)
	}
	return decodeStored[T](data)
}

func decodeStored[T any](data []byte) (T, error) {
	var v T
	if len(data) > 0 {
		if err := json.Unmarshal(data, &v); err != nil {
			return v, consumer.Permanent(fmt.Errorf("postgres: the stored result does not decode: %w", err))
		}
	}
	return v, consumer.AlreadyApplied()
}

// txError names what a failed statement or commit of InTx or InSQLTx means for
// the caller. A missing completion table is a store outage: the claim is given
// back and no attempt counted, so a backlog waits for Migrate instead of being
// dead-lettered.
func txError(err error) error {
	if out := notMigratedOutage(err); out != nil {
		return out
	}
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && (pe.Code == serializationFailure || pe.Code == deadlockDetected):
		return fmt.Errorf("postgres: %s (the transaction was rolled back; retried later): %w", pe.Message, err)
	case !errors.As(err, &pe) && outOfReach(err):
		// No answer from the server (connection refused or lost, a timeout): the
		// database is out of reach, which is an outage, not the handler's attempt.
		// A commit whose reply was lost may have applied: the next delivery finds
		// its completion and answers DUPLICATE.
		return consumer.Abandon(&consumer.StoreError{Op: "transactional completion", Err: err})
	}
	return fmt.Errorf("postgres: %w", err)
}

// outOfReach reports whether err says the database could not be reached or
// stopped answering, rather than something the handler's code did (a
// transaction it closed itself, rows it left open), which every run would repeat.
func outOfReach(err error) bool {
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || pgconn.Timeout(err) || pgconn.SafeToRetry(err) || errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, driver.ErrBadConn)
}

// InSQLTx is InTx for database/sql: fn gets a *sql.Tx of db (any PostgreSQL
// driver; the jackc/pgx/v5/stdlib one is tested).
func InSQLTx[T any](ctx context.Context, db *sql.DB, fn func(ctx context.Context, tx *sql.Tx) (T, error), opts ...TxOption) (T, error) {
	var zero T
	cfg, err := txSettings(opts)
	if err != nil {
		return zero, err
	}
	if db == nil {
		return zero, errors.New("postgres: InSQLTx: nil database")
	}
	if fn == nil {
		return zero, errors.New("postgres: InSQLTx: nil function")
	}
	info, ok := consumer.InfoFromContext(ctx)
	if !ok {
		return zero, errors.New("postgres: InSQLTx runs inside an idemkit handler (its context names the key): call it from the function you give ExecuteIdempotently or an adapter")
	}
	var txo *sql.TxOptions
	if cfg.isolation != "" {
		txo = &sql.TxOptions{Isolation: sqlIsolation(cfg.isolation)}
	}
	tx, err := db.BeginTx(ctx, txo)
	if err != nil {
		return zero, txError(fmt.Errorf("begin: %w", err))
	}
	v, err := func() (T, error) {
		defer func() { // a panic in fn: give database/sql its connection back first
			if p := recover(); p != nil {
				_ = tx.Rollback()
				panic(p)
			}
		}()
		return fn(ctx, tx)
	}()
	if err != nil {
		_ = tx.Rollback()
		return zero, err
	}
	result, err := json.Marshal(v)
	if err != nil {
		_ = tx.Rollback()
		return zero, consumer.Permanent(fmt.Errorf("postgres: the result cannot be stored as JSON: %w", err))
	}
	h := keyHash(info.Scope, info.Key)
	res, err := tx.ExecContext(ctx, insertCompletion, h, info.Scope, info.Fence, result, cfg.retention.Microseconds())
	if err == nil {
		if n, _ := res.RowsAffected(); n == 0 {
			_ = tx.Rollback()
			var data []byte
			if err := db.QueryRowContext(ctx, selectCompletion, h).Scan(&data); err != nil {
				return zero, txError(err)
			}
			return decodeStored[T](data)
		}
		err = tx.Commit()
	}
	if err != nil {
		_ = tx.Rollback()
		return zero, txError(err)
	}
	return v, nil
}

func sqlIsolation(l pgx.TxIsoLevel) sql.IsolationLevel {
	switch l {
	case pgx.Serializable:
		return sql.LevelSerializable
	case pgx.RepeatableRead:
		return sql.LevelRepeatableRead
	case pgx.ReadUncommitted:
		return sql.LevelReadUncommitted
	}
	return sql.LevelReadCommitted
}

// Reap deletes up to limit rows past their retention, oldest first (completion
// rows, then the Store's records), and returns how many it deleted; call it until
// it returns less than limit. Each call is at most two short statements, so it
// never holds many locks at once.
func Reap(ctx context.Context, db interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}, limit int) (int64, error) {
	if db == nil || typednil.Is(db) {
		return 0, errors.New("postgres: Reap: nil database")
	}
	if limit < 1 {
		return 0, fmt.Errorf("postgres: Reap(%d): give a limit of at least 1", limit)
	}
	// The expiry is tested again on the row deleted: the subquery's rows are read
	// once, and a row a claim revived meanwhile (the Store updates an expired row in
	// place) must not go.
	tag, err := db.Exec(ctx, `DELETE FROM idemkit_completions WHERE key_hash IN (
		SELECT key_hash FROM idemkit_completions WHERE expires_at < now() ORDER BY expires_at LIMIT $1)
		AND expires_at < now()`, limit)
	if err != nil {
		return 0, fmt.Errorf("postgres: Reap: %w", missingSchema(err, completionsTable))
	}
	n := tag.RowsAffected()
	if left := int64(limit) - n; left > 0 { // the Store's records, when its table exists
		tag, err = db.Exec(ctx, `DELETE FROM idemkit_records WHERE key_hash IN (
			SELECT key_hash FROM idemkit_records WHERE expires_ms < (extract(epoch FROM clock_timestamp()) * 1000)::bigint
			ORDER BY expires_ms LIMIT $1)
			AND expires_ms < (extract(epoch FROM clock_timestamp()) * 1000)::bigint`, left)
		if err != nil {
			return n, fmt.Errorf("postgres: Reap: %w", missingSchema(err, recordsTable))
		}
		n += tag.RowsAffected()
	}
	return n, nil
}
