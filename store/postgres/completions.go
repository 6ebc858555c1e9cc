package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/typednil"
	"github.com/jackc/pgx/v5"
)

// Completions returns a consumer.CompletionLookup that reads the completion rows
// InTx and InSQLTx write in db, for stores that keep their records elsewhere (the
// Redis store, say) while handlers commit their effects with InTx: given to such
// a store with consumer.WithCompletions, it keeps a key whose effect committed
// from being reported exhausted. The Store of this package needs none: its claims
// read the completion table themselves. Each lookup is one indexed read, bounded
// by consumer.DefaultCallTimeout. The result found is the JSON InTx stored, which
// the store's default codec (consumer.JSONCodec) reads.
func Completions(db Beginner) consumer.CompletionLookup {
	return completionTable{db: db}
}

// completionTable is the lookup Completions returns.
type completionTable struct{ db Beginner }

var _ consumer.CompletionLookup = completionTable{}

// queryRower is what a pool or a connection has to read one row outside a
// transaction.
type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Completed returns the result InTx recorded for key in scope, and whether a
// completion row is there (whatever its age: a row past its retention that Reap
// has not deleted yet still says the effect committed).
func (c completionTable) Completed(ctx context.Context, scope string, key consumer.Key) ([]byte, bool, error) {
	if c.db == nil || typednil.Is(c.db) {
		return nil, false, errors.New("postgres: Completions: nil database: give Completions a pool")
	}
	if err := key.Validate(); err != nil {
		return nil, false, err
	}
	ctx, cancel := context.WithTimeout(ctx, consumer.DefaultCallTimeout)
	defer cancel()
	q, ok := c.db.(queryRower)
	if !ok {
		tx, err := c.db.Begin(ctx)
		if err != nil {
			return nil, false, fmt.Errorf("postgres: completion lookup: begin: %w", err)
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		q = tx
	}
	var result []byte
	err := q.QueryRow(ctx, selectCompletion, keyHash(scope, key)).Scan(&result)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("postgres: completion lookup: %w", missingSchema(err, completionsTable))
	}
	return result, true, nil
}
