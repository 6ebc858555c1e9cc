package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/store/memory"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// beginOnly is a Beginner with nothing else: the lookup reads in a transaction
// of its own.
type beginOnly struct{ pool *pgxpool.Pool }

func (b beginOnly) Begin(ctx context.Context) (pgx.Tx, error) { return b.pool.Begin(ctx) }

// Completions finds the completion a handler committed with InTx (its result, in
// the handler's scope), and finds nothing for another key or another scope, on a
// pool and on a bare Beginner alike.
func TestCompletionsFindsWhatInTxCommitted(t *testing.T) {
	pool := migrated(t)
	ctx := context.Background()
	store, err := memory.NewStore(consumer.WithScope("payments"))
	if err != nil {
		t.Fatal(err)
	}
	r := consumer.ExecuteIdempotently(ctx, store, "o-1", nil, func(ctx context.Context) (string, error) {
		return InTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) (string, error) {
			_, err := tx.Exec(ctx, `INSERT INTO charges VALUES ('o-1', 42)`)
			return "receipt-1", err
		})
	})
	if r.Outcome != consumer.Success {
		t.Fatalf("handler: %v %v", r.Outcome, r.Err)
	}
	for name, db := range map[string]Beginner{"Pool": pool, "Beginner": beginOnly{pool}} {
		t.Run(name, func(t *testing.T) {
			l := Completions(db)
			cases := []struct {
				scope string
				key   consumer.Key
				found bool
			}{
				{"payments", "o-1", true},
				{"payments", "o-2", false},
				{"refunds", "o-1", false},
			}
			for _, c := range cases {
				res, found, err := l.Completed(ctx, c.scope, c.key)
				if err != nil || found != c.found {
					t.Fatalf("Completed(%s, %s) = %q, %v, %v; want found %v", c.scope, c.key, res, found, err, c.found)
				}
				if want := map[bool]string{true: `"receipt-1"`}[c.found]; string(res) != want {
					t.Fatalf("Completed(%s, %s) = %q, want %q", c.scope, c.key, res, want)
				}
			}
		})
	}
}

func TestCompletionsBadInput(t *testing.T) {
	ctx := context.Background()
	var nilPool *pgxpool.Pool
	for _, db := range []Beginner{nil, nilPool} {
		if _, _, err := Completions(db).Completed(ctx, "s", "k"); err == nil || !strings.Contains(err.Error(), "nil database") {
			t.Fatalf("nil database: %v", err)
		}
	}
	if _, _, err := Completions(migrated(t)).Completed(ctx, "s", ""); err == nil {
		t.Fatal("an empty key was looked up")
	}
	if _, _, err := Completions(schemaPool(t)).Completed(ctx, "s", "k"); err == nil || !strings.Contains(err.Error(), "Migrate") {
		t.Fatalf("missing table: %v", err)
	}
}
