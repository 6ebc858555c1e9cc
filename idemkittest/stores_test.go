package idemkittest_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/idemkittest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/postgres"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// chargesDB is a schema of the test's own in the test PostgreSQL, migrated, with
// a charges table that has no unique constraint (so that a second charge shows).
func chargesDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	db := testenv.Postgres(t) // skips, or fails under IDEMKIT_REQUIRE_SERVICES, without a server
	schema := "t_" + strings.ToLower(strings.NewReplacer(":", "_", "-", "_", "/", "_").Replace(testenv.Prefix(t)))
	if len(schema) > 60 {
		schema = schema[len(schema)-60:]
	}
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) })
	cfg, err := pgxpool.ParseConfig(testenv.PostgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE charges (order_id text NOT NULL, cents int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return pool
}

// ledger is the charges table, seen by the kit.
type ledger struct {
	t    *testing.T
	pool *pgxpool.Pool
}

func (l ledger) count() int {
	var n int
	if err := l.pool.QueryRow(context.Background(), `SELECT count(*) FROM charges`).Scan(&n); err != nil {
		l.t.Fatal(err)
	}
	return n
}

func (l ledger) reset() {
	if _, err := l.pool.Exec(context.Background(), `DELETE FROM charges`); err != nil {
		l.t.Fatal(err)
	}
}

func insertCharge(ctx context.Context, tx pgx.Tx) (string, error) {
	_, err := tx.Exec(ctx, `INSERT INTO charges VALUES ('42', 1999)`)
	return "ch_42", err
}

// The charge written with postgres.InTx (the row and the key's completion
// commit together) passes every scenario against real PostgreSQL, with no
// warning either: its completion row outlives the store's record. The same
// charge in a plain transaction, committed before idemkit records the
// completion, fails exactly where plain completion is at least once.
func TestInTxPassesAgainstPostgres(t *testing.T) {
	pool := chargesDB(t)
	l := ledger{t, pool}
	ctx := context.Background()
	inTx := func(ctx context.Context) (string, error) { return postgres.InTx(ctx, pool, insertCharge) }
	kit := idemkittest.New[string](t, idemkittest.WithEffects(l.count), idemkittest.WithReset(l.reset))
	rep := kit.RequireExactlyOnce(ctx, msg, inTx)
	for _, v := range rep.Verdicts {
		if v.Warning != "" || v.Effects != 1 {
			t.Errorf("InTx: %s: effects %d, warning %q", v.Scenario, v.Effects, v.Warning)
		}
	}

	plainTx := func(ctx context.Context) (string, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return "", err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		v, err := insertCharge(ctx, tx)
		if err != nil {
			return "", err
		}
		return v, tx.Commit(ctx)
	}
	rep = kit.Check(ctx, msg, plainTx)
	want := []idemkittest.Scenario{idemkittest.CrashAfterEffect, idemkittest.StoreDownAtCompletion}
	if got := failedScenarios(rep); !slices.Equal(got, want) || rep.Err != nil {
		t.Fatalf("plain transaction: failed %v (%v), want %v\n%s", got, rep.Err, want, rep)
	}
	if v, _ := rep.Verdict(idemkittest.AfterRetention); v.Warning == "" {
		t.Errorf("plain transaction: no warning after the retention")
	}
}

// The scenarios run on a user's store: the PostgreSQL store itself, with a
// short lease and retention, waited out on the database's clock.
func TestInTxOnThePostgresStore(t *testing.T) {
	pool := chargesDB(t)
	l := ledger{t, pool}
	kit := idemkittest.New[string](t, idemkittest.WithEffects(l.count), idemkittest.WithReset(l.reset),
		idemkittest.WithStore(func(scope string) (consumer.Store, error) {
			return postgres.NewStore(pool, consumer.WithScope(scope), consumer.WithLease(time.Second),
				consumer.WithRetention(time.Second), consumer.WithLogger(slog.New(slog.DiscardHandler)))
		}))
	rep := kit.RequireExactlyOnce(context.Background(), msg,
		func(ctx context.Context) (string, error) { return postgres.InTx(ctx, pool, insertCharge) })
	for _, v := range rep.Verdicts {
		if !v.Passed() || v.Warning != "" || v.Effects != 1 {
			t.Errorf("%s: effects %d, passed %v, warning %q, skipped %q", v.Scenario, v.Effects, v.Passed(), v.Warning, v.Skipped)
		}
	}
}

// On Redis (a user's store, a shared server) the plain handler fails where it
// does on the memory store; the redelivery after a 24h retention is skipped
// with a note, not waited for.
func TestPlainHandlerOnRedis(t *testing.T) {
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	var c counter
	kit := idemkittest.New[string](t, idemkittest.WithEffects(c.count),
		idemkittest.WithStore(func(scope string) (consumer.Store, error) {
			return redisstore.NewStore(rdb, consumer.WithScope(scope), consumer.WithPrefix(prefix),
				consumer.WithLease(time.Second), consumer.WithLogger(slog.New(slog.DiscardHandler)))
		}))
	rep := kit.Check(context.Background(), msg, c.careful)
	want := []idemkittest.Scenario{idemkittest.CrashAfterEffect, idemkittest.StoreDownAtCompletion}
	if got := failedScenarios(rep); !slices.Equal(got, want) || rep.Err != nil {
		t.Fatalf("failed %v (%v), want %v\n%s", got, rep.Err, want, rep)
	}
	v, _ := rep.Verdict(idemkittest.AfterRetention)
	containsAll(t, "the skip note", v.Skipped, "the kit waits at most 10s", "consumer.WithRetention(time.Second)")
}
