package postgres

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/store/memory"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A database out of reach when InTx begins its transaction is a store outage,
// not the handler's attempt: with one attempt allowed, the key still runs once
// the database answers again.
func TestInTxDatabaseOutOfReachIsNotAnAttempt(t *testing.T) {
	good := schemaPool(t)
	ctx := context.Background()
	if err := Migrate(ctx, good); err != nil {
		t.Fatal(err)
	}
	down, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:1/test?connect_timeout=2") // nothing listens on port 1
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(down.Close)
	store, err := memory.NewStore(consumer.WithScope("payments"), consumer.WithMaxAttempts(1))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	charge := func(db Beginner) func(ctx context.Context) (int, error) {
		return func(ctx context.Context) (int, error) {
			return InTx(ctx, db, func(ctx context.Context, tx pgx.Tx) (int, error) {
				runs.Add(1)
				return 1, nil
			})
		}
	}
	for range 3 {
		r := consumer.ExecuteIdempotently(ctx, store, "order-1", nil, charge(down))
		if r.Outcome != consumer.Error || !errors.Is(r.Err, consumer.ErrStoreUnavailable) || !r.Retryable() ||
			!consumer.NotAnAttempt(r.Err) {
			t.Fatalf("InTx with the database down: %v %v, want a retryable store outage, not an attempt", r.Outcome, r.Err)
		}
	}
	r := consumer.ExecuteIdempotently(ctx, store, "order-1", nil, charge(good))
	if r.Outcome != consumer.Success || r.Attempt != 1 || runs.Load() != 1 {
		t.Fatalf("once the database answers: %v %v attempt %d, %d runs; want SUCCESS as attempt 1, one run", r.Outcome, r.Err, r.Attempt, runs.Load())
	}
}
