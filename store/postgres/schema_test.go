package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	idemamqp "github.com/idemkit/idemkit/adapters/amqp"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/memory"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// unmigrated is a schema of the test's own with the business table and none of
// the package's tables.
func unmigrated(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := schemaPool(t)
	if _, err := pool.Exec(context.Background(), `CREATE TABLE charges (order_id text NOT NULL, amount int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return pool
}

// outageOfMigration fails t unless err is the error of a missing migration: a
// store outage (retried, never dead-lettered) that names the table and the fix.
func outageOfMigration(t *testing.T, what string, err error) {
	t.Helper()
	switch {
	case !errors.Is(err, ErrNotMigrated), !errors.Is(err, consumer.ErrStoreUnavailable):
		t.Fatalf("%s: %v, want a store outage matching ErrNotMigrated", what, err)
	case consumer.ActionFor(consumer.Error, err) != consumer.Retry:
		t.Fatalf("%s: action %v for %v, want retry", what, consumer.ActionFor(consumer.Error, err), err)
	case !strings.Contains(err.Error(), "postgres.Migrate"):
		t.Fatalf("%s: %v does not say to run Migrate", what, err)
	}
}

// Before Migrate, every delivery through ExecuteBatch whose handler calls InTx
// (or InSQLTx) ends in a retryable store outage and counts no attempt, however
// many times it comes (more than the key's attempts); after Migrate each key is
// charged once, on its first counted attempt.
func TestInTxBeforeMigrateIsAnOutage(t *testing.T) {
	for _, api := range []string{"pgx", "database/sql"} {
		t.Run(api, func(t *testing.T) {
			const n, maxAttempts = 20, 2
			pool := unmigrated(t)
			db := stdlib.OpenDBFromPool(pool)
			t.Cleanup(func() { _ = db.Close() })
			store, err := memory.NewStore(consumer.WithScope("payments"), consumer.WithMaxAttempts(maxAttempts))
			if err != nil {
				t.Fatal(err)
			}
			items := make([]consumer.BatchItem, n)
			for i := range items {
				items[i] = consumer.BatchItem{Key: consumer.Key(fmt.Sprintf("o-%02d", i))}
			}
			var runs atomic.Int32
			charge := func(ctx context.Context, _ int, it consumer.BatchItem) (string, error) {
				runs.Add(1)
				if api == "pgx" {
					return InTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) (string, error) {
						_, err := tx.Exec(ctx, `INSERT INTO charges VALUES ($1, 1)`, string(it.Key))
						return "ch-" + string(it.Key), err
					})
				}
				return InSQLTx(ctx, db, func(ctx context.Context, tx *sql.Tx) (string, error) {
					_, err := tx.ExecContext(ctx, `INSERT INTO charges VALUES ($1, 1)`, string(it.Key))
					return "ch-" + string(it.Key), err
				})
			}
			ctx := context.Background()
			for round := range maxAttempts + 2 {
				for _, r := range consumer.ExecuteBatch(ctx, store, items, charge, consumer.WithConcurrency(4)) {
					if r.Outcome != consumer.Error {
						t.Fatalf("round %d, %s: %v before Migrate", round, r.Key, r.Outcome)
					}
					outageOfMigration(t, fmt.Sprintf("round %d, %s", round, r.Key), r.Err)
					if !strings.Contains(r.Err.Error(), "idemkit_completions") {
						t.Fatalf("round %d, %s: %v does not name the table", round, r.Key, r.Err)
					}
				}
			}
			if got := runs.Load(); got != n*(maxAttempts+2) {
				t.Fatalf("%d handler runs before Migrate, want %d", got, n*(maxAttempts+2))
			}
			if err := Migrate(ctx, pool); err != nil {
				t.Fatal(err)
			}
			runs.Store(0)
			for _, r := range consumer.ExecuteBatch(ctx, store, items, charge, consumer.WithConcurrency(4)) {
				if r.Outcome != consumer.Success || r.Attempt != 1 {
					t.Fatalf("%s after Migrate: %v on attempt %d (%v), want SUCCESS on attempt 1", r.Key, r.Outcome, r.Attempt, r.Err)
				}
			}
			for _, r := range consumer.ExecuteBatch(ctx, store, items, charge) {
				if r.Outcome != consumer.Duplicate || r.Value != "ch-"+string(r.Key) {
					t.Fatalf("%s delivered again: %v %q (%v)", r.Key, r.Outcome, r.Value, r.Err)
				}
			}
			if got := runs.Load(); got != n {
				t.Fatalf("%d handler runs after Migrate, want %d", got, n)
			}
			got := rows(t, pool, "charges")
			if len(got) != n {
				t.Fatalf("%d keys charged, want %d", len(got), n)
			}
			for id, c := range got {
				if c != 1 {
					t.Fatalf("%s charged %d times", id, c)
				}
			}
		})
	}
}

// A RabbitMQ worker whose handler calls InTx on a database without the
// migration cycles its deliveries through the delayed-retry queue without
// counting them, past the worker's and the store's attempts: none is
// dead-lettered, and after Migrate each payment is charged once, on its first
// counted attempt.
func TestWorkerBeforeMigrateDeadLettersNothing(t *testing.T) {
	const n, maxAttempts = 20, 2
	url := testenv.AMQP(t)
	pool := unmigrated(t)
	store, err := memory.NewStore(consumer.WithScope("payments"), consumer.WithMaxAttempts(maxAttempts))
	if err != nil {
		t.Fatal(err)
	}
	queue := strings.ReplaceAll(testenv.Prefix(t), ":", "-") + ".payments"
	topo := idemamqp.Topology{Queue: queue, RetryDelays: []time.Duration{20 * time.Millisecond}}
	conn, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := topo.Declare(conn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c, err := amqp091.Dial(url); err == nil {
			_ = topo.Delete(c)
			_ = c.Close()
		}
	})
	var failures, attemptsSeen atomic.Int32
	var migrated atomic.Bool
	w, err := idemamqp.NewTypedWorker(store, url, topo,
		func(d amqp091.Delivery) (payment, error) {
			var p payment
			return p, json.Unmarshal(d.Body, &p)
		},
		func(ctx context.Context, p payment, _ amqp091.Delivery) (string, error) {
			if info, _ := consumer.InfoFromContext(ctx); info.Attempt != 1 {
				attemptsSeen.Add(1)
			}
			v, err := InTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) (string, error) {
				_, err := tx.Exec(ctx, `INSERT INTO charges VALUES ($1, $2)`, p.ID, p.Amount)
				return "ch_" + p.ID, err
			})
			if err != nil && !migrated.Load() {
				failures.Add(1)
			}
			return v, err
		},
		idemamqp.WithMaxAttempts(maxAttempts), idemamqp.WithConcurrency(4), idemamqp.WithShutdownGrace(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	publishOnce(t, conn, queue, n)

	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	depth := func(q string) int {
		st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return st.Messages
	}
	// Every payment fails more times than either the worker or the store allows.
	want := int32(n * (maxAttempts + 2))
	waitFor(t, 60*time.Second, func() string {
		if dlq := depth(queue + ".dlq"); dlq != 0 {
			t.Fatalf("%d payments dead-lettered before Migrate", dlq)
		}
		if got := failures.Load(); got < want {
			return fmt.Sprintf("%d handler failures before Migrate, want %d", got, want)
		}
		return ""
	})
	if err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	migrated.Store(true)
	waitFor(t, 60*time.Second, func() string {
		charged, dlq := len(rows(t, pool, "charges")), depth(queue+".dlq")
		if dlq != 0 {
			t.Fatalf("%d payments dead-lettered", dlq)
		}
		if charged != n || depth(queue) != 0 || depth(topo.RetryQueue(20*time.Millisecond)) != 0 {
			return fmt.Sprintf("%d of %d payments charged", charged, n)
		}
		return ""
	})
	for id, c := range rows(t, pool, "charges") {
		if c != 1 {
			t.Fatalf("payment %s charged %d times", id, c)
		}
	}
	if got := attemptsSeen.Load(); got != 0 {
		t.Fatalf("%d handler runs on a counted attempt after the first", got)
	}
	if dlq := depth(queue + ".dlq"); dlq != 0 {
		t.Fatalf("%d payments dead-lettered", dlq)
	}
}

// publishOnce publishes n payments pay-0000... once each, confirmed.
func publishOnce(t *testing.T, conn *amqp091.Connection, queue string, n int) {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		id := fmt.Sprintf("pay-%04d", i)
		body, _ := json.Marshal(payment{ID: id, Amount: 100 + i})
		c, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, false, false,
			amqp091.Publishing{MessageId: id, Body: body, DeliveryMode: amqp091.Persistent})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := c.WaitContext(context.Background()); err != nil || !ok {
			t.Fatalf("publish not confirmed: %v", err)
		}
	}
}

// waitFor polls cond (an empty answer: done) until it holds, failing t with its
// last answer after d.
func waitFor(t *testing.T, d time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		why := cond()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// migrateTo applies the package's files up to and including version, as a user's
// own migration tool would, leaving the later ones out.
func migrateTo(t *testing.T, pool *pgxpool.Pool, version string) {
	t.Helper()
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE idemkit_schema_migrations (version text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Version > version {
			break
		}
		if _, err := pool.Exec(ctx, m.SQL); err != nil {
			t.Fatalf("%s: %v", m.Version, err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO idemkit_schema_migrations VALUES ($1)`, m.Version); err != nil {
			t.Fatal(err)
		}
	}
}

// A Store on a database without its table, or with the table of an earlier
// version (a column missing), says so in Check and fails every call as a store
// outage that runs no handler and counts no attempt; after Migrate each key runs
// once, on attempt 1.
func TestStoreBeforeMigrateIsAnOutage(t *testing.T) {
	for _, c := range []struct {
		name, upTo, missing string
		partitioned         bool
	}{
		{name: "no table", missing: "idemkit_records"},
		{name: "no column", upTo: "003_records", missing: "errs"},
		{name: "partitioned/no table", upTo: "004_record_errors", missing: partitionedTable, partitioned: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			const n = 10
			pool := schemaPool(t)
			if c.upTo != "" {
				migrateTo(t, pool, c.upTo)
			}
			opts := []consumer.Option{consumer.WithScope("payments"), consumer.WithMaxAttempts(1)}
			store, err := NewStore(pool, opts...)
			if c.partitioned {
				store, err = NewPartitionedStore(pool, opts...)
			}
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			err = store.Check(ctx)
			if !errors.Is(err, ErrNotMigrated) || !strings.Contains(err.Error(), c.missing) || !strings.Contains(err.Error(), "postgres.Migrate") {
				t.Fatalf("Check: %v, want ErrNotMigrated naming %s and Migrate", err, c.missing)
			}
			items := make([]consumer.BatchItem, n)
			for i := range items {
				items[i] = consumer.BatchItem{Key: consumer.Key(fmt.Sprintf("o-%02d", i))}
			}
			var runs atomic.Int32
			handler := func(ctx context.Context, _ int, it consumer.BatchItem) (string, error) {
				runs.Add(1)
				return "done-" + string(it.Key), nil
			}
			for round := range 3 {
				for _, r := range consumer.ExecuteBatch(ctx, store, items, handler) {
					if r.Outcome != consumer.Error {
						t.Fatalf("round %d, %s: %v before Migrate", round, r.Key, r.Outcome)
					}
					outageOfMigration(t, fmt.Sprintf("round %d, %s", round, r.Key), r.Err)
				}
			}
			if got := runs.Load(); got != 0 {
				t.Fatalf("%d handler runs before Migrate", got)
			}
			if err := Migrate(ctx, pool); err != nil {
				t.Fatal(err)
			}
			if c.partitioned {
				if _, _, err := MaintainPartitions(ctx, pool, Partitioning{Keep: time.Hour}); err != nil {
					t.Fatal(err)
				}
			}
			if err := store.Check(ctx); err != nil {
				t.Fatalf("Check after Migrate: %v", err)
			}
			for round := range 2 {
				for _, r := range consumer.ExecuteBatch(ctx, store, items, handler) {
					want := []consumer.Outcome{consumer.Success, consumer.Duplicate}[round]
					if r.Outcome != want || r.Attempt != 1 {
						t.Fatalf("round %d after Migrate, %s: %v on attempt %d (%v), want %v on attempt 1", round, r.Key, r.Outcome, r.Attempt, r.Err, want)
					}
				}
			}
			if got := runs.Load(); got != n {
				t.Fatalf("%d handler runs after Migrate, want %d", got, n)
			}
		})
	}
}

// Check and CheckSQL, for services that call InTx: a missing completion table or
// a missing column is ErrNotMigrated naming it; a migrated database passes; an
// unreachable one is a store outage.
func TestCheckFindsAMissingMigration(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name, create, missing string
	}{
		{name: "no table", missing: "idemkit_completions"},
		{name: "no column", create: `CREATE TABLE idemkit_completions (key_hash bytea PRIMARY KEY, scope text, fence bigint, result bytea, completed_at timestamptz)`, missing: "expires_at"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pool := unmigrated(t)
			if c.create != "" {
				if _, err := pool.Exec(ctx, c.create); err != nil {
					t.Fatal(err)
				}
			}
			db := stdlib.OpenDBFromPool(pool)
			defer db.Close()
			for name, err := range map[string]error{"Check": Check(ctx, pool), "CheckSQL": CheckSQL(ctx, db)} {
				if !errors.Is(err, ErrNotMigrated) || !strings.Contains(err.Error(), c.missing) || !strings.Contains(err.Error(), "postgres.Migrate") {
					t.Fatalf("%s: %v, want ErrNotMigrated naming %s and Migrate", name, err, c.missing)
				}
			}
			// InTx meets the same: an outage, not an attempt.
			store, err := memory.NewStore(consumer.WithScope("payments"), consumer.WithMaxAttempts(1))
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				r := consumer.ExecuteIdempotently(ctx, store, "o-1", nil, func(ctx context.Context) (int, error) {
					return InTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) (int, error) {
						_, err := tx.Exec(ctx, `INSERT INTO charges VALUES ('o-1', 1)`)
						return 1, err
					})
				})
				outageOfMigration(t, "InTx", r.Err)
				if !strings.Contains(r.Err.Error(), c.missing) {
					t.Fatalf("InTx: %v does not name %s", r.Err, c.missing)
				}
			}
			if len(rows(t, pool, "charges")) != 0 {
				t.Fatal("a charge committed without its completion")
			}
		})
	}
	pool := migrated(t)
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	if err := Check(ctx, pool); err != nil {
		t.Fatalf("Check on a migrated database: %v", err)
	}
	if err := CheckSQL(ctx, db); err != nil {
		t.Fatalf("CheckSQL on a migrated database: %v", err)
	}
	cfg, err := pgxpool.ParseConfig("postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	down, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	if err := Check(ctx, down); !errors.Is(err, consumer.ErrStoreUnavailable) || errors.Is(err, ErrNotMigrated) {
		t.Fatalf("Check on an unreachable database: %v", err)
	}
	if err := Check(ctx, nil); err == nil {
		t.Fatal("Check on a nil database")
	}
}
