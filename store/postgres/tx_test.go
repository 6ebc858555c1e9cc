package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/memory"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// migrated is a schema of the test's own with the package's tables and a
// business table without any unique constraint (so that a second charge shows).
func migrated(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := schemaPool(t)
	ctx := context.Background()
	if err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE charges (order_id text NOT NULL, amount int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return pool
}

func redisStore(t *testing.T) *redisstore.Store {
	t.Helper()
	s, err := redisstore.NewStore(testenv.Redis(t), consumer.WithPrefix(testenv.Prefix(t)), consumer.WithScope("payments"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func rows(t *testing.T, pool *pgxpool.Pool, table string) map[string]int {
	t.Helper()
	r, err := pool.Query(context.Background(), `SELECT order_id, count(*) FROM `+table+` GROUP BY order_id`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for r.Next() {
		var id string
		var n int
		if err := r.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		out[id] = n
	}
	return out
}

// A handler whose effect committed with its completion and whose process then
// died before the store recorded it (here: the handler panics after InTx): the
// next delivery finds the committed completion, does not run the business write
// again, and ends DUPLICATE with the stored result.
func TestInTxCommitThenCrashIsAppliedOnce(t *testing.T) {
	pool := migrated(t)
	store := redisStore(t)
	ctx := context.Background()
	var runs atomic.Int32
	crash := true
	handler := func(ctx context.Context) (string, error) {
		v, err := InTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) (string, error) {
			runs.Add(1)
			_, err := tx.Exec(ctx, `INSERT INTO charges VALUES ('o-1', 42)`)
			return "receipt-1", err
		})
		if crash {
			crash = false
			panic("the process dies after the commit")
		}
		return v, err
	}
	r := consumer.ExecuteIdempotently(ctx, store, "o-1", nil, handler)
	if r.Outcome != consumer.Error || !errors.Is(r.Err, consumer.ErrHandlerPanic) {
		t.Fatalf("first delivery: %v %v", r.Outcome, r.Err)
	}
	r = consumer.ExecuteIdempotently(ctx, store, "o-1", nil, handler)
	if r.Outcome != consumer.Duplicate || r.Value != "receipt-1" {
		t.Fatalf("second delivery: %v %q %v, want DUPLICATE receipt-1", r.Outcome, r.Value, r.Err)
	}
	r = consumer.ExecuteIdempotently(ctx, store, "o-1", nil, handler)
	if r.Outcome != consumer.Duplicate || r.Value != "receipt-1" {
		t.Fatalf("third delivery: %v %q %v", r.Outcome, r.Value, r.Err)
	}
	if got := rows(t, pool, "charges")["o-1"]; got != 1 {
		t.Fatalf("%d charges, want 1", got)
	}
	if runs.Load() != 2 { // the second run's writes were rolled back with its transaction
		t.Fatalf("%d runs of the transaction body, want 2", runs.Load())
	}
}

// A handler error rolls the business writes back; database/sql works the same.
func TestInTxRollbackAndSQL(t *testing.T) {
	pool := migrated(t)
	store := redisStore(t)
	ctx := context.Background()
	r := consumer.ExecuteIdempotently(ctx, store, "o-2", nil, func(ctx context.Context) (int, error) {
		return InTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) (int, error) {
			if _, err := tx.Exec(ctx, `INSERT INTO charges VALUES ('o-2', 1)`); err != nil {
				return 0, err
			}
			return 0, consumer.Permanent(errors.New("card declined"))
		})
	})
	if r.Outcome != consumer.Error || !errors.Is(r.Err, consumer.ErrPermanent) || rows(t, pool, "charges")["o-2"] != 0 {
		t.Fatalf("declined: %v %v, %d rows", r.Outcome, r.Err, rows(t, pool, "charges")["o-2"])
	}

	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	for i := range 3 {
		r := consumer.ExecuteIdempotently(ctx, store, "o-3", nil, func(ctx context.Context) (int, error) {
			return InSQLTx(ctx, db, func(ctx context.Context, tx *sql.Tx) (int, error) {
				_, err := tx.ExecContext(ctx, `INSERT INTO charges VALUES ('o-3', 7)`)
				return 7, err
			}, WithIsolation(pgx.Serializable))
		})
		want := consumer.Success
		if i > 0 {
			want = consumer.Duplicate
		}
		if r.Outcome != want || r.Value != 7 {
			t.Fatalf("database/sql delivery %d: %v %d %v", i, r.Outcome, r.Value, r.Err)
		}
	}
	if rows(t, pool, "charges")["o-3"] != 1 {
		t.Fatal("database/sql: not one row")
	}
}

// 16 workers deliver 200 keys three times each, at once: one business row per key.
func TestInTxConcurrentDeliveries(t *testing.T) {
	pool := migrated(t)
	store := redisStore(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	var failed atomic.Int32
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range 3 {
				for k := range 200 {
					if (k+w+d)%16 != 0 && d != 0 {
						continue
					}
					id := fmt.Sprintf("o-%03d", k)
					for {
						r := consumer.ExecuteIdempotently(ctx, store, consumer.Key(id), nil, func(ctx context.Context) (string, error) {
							return InTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) (string, error) {
								_, err := tx.Exec(ctx, `INSERT INTO charges VALUES ($1, 1)`, id)
								return id, err
							})
						})
						if r.Outcome == consumer.InProgress {
							continue
						}
						if r.Outcome == consumer.Error {
							failed.Add(1)
						}
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	got := rows(t, pool, "charges")
	if len(got) != 200 || failed.Load() != 0 {
		t.Fatalf("%d keys charged, %d failures", len(got), failed.Load())
	}
	for id, n := range got {
		if n != 1 {
			t.Fatalf("%s charged %d times", id, n)
		}
	}
}

func TestInTxBadInput(t *testing.T) {
	pool := schemaPool(t) // no Migrate
	store := redisStore(t)
	ctx := context.Background()
	r := consumer.ExecuteIdempotently(ctx, store, "o-4", nil, func(ctx context.Context) (int, error) {
		return InTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) (int, error) { return 1, nil })
	})
	if r.Err == nil || !strings.Contains(r.Err.Error(), "Migrate") {
		t.Fatalf("missing table: %v", r.Err)
	}
	if _, err := InTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) (int, error) { return 1, nil }); err == nil ||
		!strings.Contains(err.Error(), "inside an idemkit handler") {
		t.Fatalf("outside a handler: %v", err)
	}
	var nilPool *pgxpool.Pool
	if _, err := InTx(ctx, nilPool, func(ctx context.Context, tx pgx.Tx) (int, error) { return 1, nil }); err == nil {
		t.Fatal("nil pool accepted")
	}
	if _, err := InTx[int](ctx, pool, nil); err == nil {
		t.Fatal("nil function accepted")
	}
	if _, err := InTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) (int, error) { return 1, nil }, WithCompletionRetention(0)); err == nil {
		t.Fatal("zero retention accepted")
	}
	if _, err := Reap(ctx, pool, 0); err == nil {
		t.Fatal("Reap(0) accepted")
	}
}

// Reap deletes expired completion rows in bounded batches and leaves live ones.
func TestReap(t *testing.T) {
	pool := migrated(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO idemkit_completions (key_hash, scope, fence, expires_at)
		SELECT decode(md5(g::text), 'hex'), 's', 1, now() - interval '1 hour' FROM generate_series(1, 250) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO idemkit_completions (key_hash, scope, fence, expires_at)
		VALUES ('\xff', 's', 1, now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	var total int64
	for {
		n, err := Reap(ctx, pool, 100)
		if err != nil {
			t.Fatal(err)
		}
		if n > 100 {
			t.Fatalf("one call deleted %d rows, above its limit", n)
		}
		total += n
		if n < 100 {
			break
		}
	}
	var left int
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM idemkit_completions`).Scan(&left)
	if total != 250 || left != 1 {
		t.Fatalf("reaped %d, %d left; want 250 and 1", total, left)
	}
}

// A serialization failure inside the transaction rolls it back and ends the
// attempt with a retryable error (the next delivery runs it again), never a dead
// letter; the next attempt commits once.
func TestInTxSerializationFailureIsRetryable(t *testing.T) {
	pool := migrated(t)
	store := redisStore(t)
	ctx := context.Background()
	fail := true
	run := func(ctx context.Context) (string, error) {
		return InTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) (string, error) {
			if _, err := tx.Exec(ctx, `INSERT INTO charges VALUES ('o-9', 9)`); err != nil {
				return "", err
			}
			if fail {
				fail = false
				_, err := tx.Exec(ctx, `DO $$ BEGIN RAISE EXCEPTION 'could not serialize access' USING ERRCODE = '40001'; END $$`)
				return "", err
			}
			return "ok", nil
		}, WithIsolation(pgx.Serializable))
	}
	r := consumer.ExecuteIdempotently(ctx, store, "o-9", nil, run)
	if r.Outcome != consumer.Error || !consumer.Retryable(r.Err) || r.Action() != consumer.Retry {
		t.Fatalf("serialization failure: %v %v (action %v), want a retryable ERROR", r.Outcome, r.Err, r.Action())
	}
	r = consumer.ExecuteIdempotently(ctx, store, "o-9", nil, run)
	if r.Outcome != consumer.Success || rows(t, pool, "charges")["o-9"] != 1 {
		t.Fatalf("retry: %v %v, %d rows", r.Outcome, r.Err, rows(t, pool, "charges")["o-9"])
	}
}

// InTx on each kind of handle: a pool (of one connection, which InTx must give
// back every time, whether it committed or rolled back), a connection (both send
// the completion row and COMMIT together), and a transaction (the completion is
// made in a savepoint). For each key, a first owner commits its business row with
// the completion; a second owner (another store, so it claims afresh) finds the
// row, its transaction is rolled back and it ends DUPLICATE with the first result.
func TestInTxOnPoolConnectionAndTransaction(t *testing.T) {
	base := migrated(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	one := poolOfOne(t, base)
	conn, err := pgx.ConnectConfig(ctx, base.Config().ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	outer, err := base.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Rollback(context.Background())
	for name, db := range map[string]Beginner{"pool": one, "conn": conn, "tx": outer} {
		first, _ := memory.NewStore(consumer.WithScope("handles"))
		second, _ := memory.NewStore(consumer.WithScope("handles"))
		for k := range 20 {
			id := fmt.Sprintf("%s-%02d", name, k)
			charge := func(ctx context.Context) (string, error) {
				return InTx(ctx, db, func(ctx context.Context, tx pgx.Tx) (string, error) {
					_, err := tx.Exec(ctx, `INSERT INTO charges VALUES ($1, 1)`, id)
					info, _ := consumer.InfoFromContext(ctx)
					return fmt.Sprintf("ch-%s-fence-%d", id, info.Fence), err
				})
			}
			a := consumer.ExecuteIdempotently(ctx, first, consumer.Key(id), nil, charge)
			b := consumer.ExecuteIdempotently(ctx, second, consumer.Key(id), nil, charge)
			if a.Outcome != consumer.Success || b.Outcome != consumer.Duplicate || b.Value != a.Value {
				t.Fatalf("%s: first %v %q %v, second %v %q %v", id, a.Outcome, a.Value, a.Err, b.Outcome, b.Value, b.Err)
			}
		}
	}
	if err := outer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got := rows(t, base, "charges")
	if len(got) != 60 {
		t.Fatalf("%d keys charged, want 60", len(got))
	}
	for id, n := range got {
		if n != 1 {
			t.Fatalf("%s charged %d times", id, n)
		}
	}
	if st := one.Stat(); st.AcquiredConns() != 0 {
		t.Fatalf("InTx kept %d connections of the pool", st.AcquiredConns())
	}
}

// A function that ends InTx's transaction itself (here: Rollback, then no error)
// gets an error, and no completion is recorded for an effect that is not there.
func TestInTxFunctionEndsItsTransaction(t *testing.T) {
	pool := migrated(t)
	store, _ := memory.NewStore(consumer.WithScope("ended"))
	ctx := context.Background()
	r := consumer.ExecuteIdempotently(ctx, store, "k", nil, func(ctx context.Context) (string, error) {
		return InTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) (string, error) {
			if _, err := tx.Exec(ctx, `INSERT INTO charges VALUES ('k', 1)`); err != nil {
				return "", err
			}
			return "ch", tx.Rollback(ctx)
		})
	})
	if r.Outcome == consumer.Success || r.Err == nil || !strings.Contains(r.Err.Error(), "ended its transaction") {
		t.Fatalf("outcome %v, err %v", r.Outcome, r.Err)
	}
	var completions int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM idemkit_completions`).Scan(&completions); err != nil || completions != 0 {
		t.Fatalf("%d completion rows, %v", completions, err)
	}
	if got := rows(t, pool, "charges"); len(got) != 0 {
		t.Fatalf("charges: %v", got)
	}
}

// A function that panics: the engine makes it a retryable failure, and InTx gives
// the pool its connection back (a pool of one connection serves the next calls).
func TestInTxPanicGivesTheConnectionBack(t *testing.T) {
	base := migrated(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	one := poolOfOne(t, base)
	store, _ := memory.NewStore(consumer.WithScope("panics"))
	for k := range 3 {
		r := consumer.ExecuteIdempotently(ctx, store, consumer.Key(fmt.Sprint("p", k)), nil, func(ctx context.Context) (string, error) {
			return InTx(ctx, one, func(ctx context.Context, tx pgx.Tx) (string, error) {
				if _, err := tx.Exec(ctx, `INSERT INTO charges VALUES ('p', 1)`); err != nil {
					return "", err
				}
				panic("handler bug")
			})
		})
		if r.Outcome != consumer.Error || r.Err == nil {
			t.Fatalf("panic %d: %v %v", k, r.Outcome, r.Err)
		}
	}
	if st := one.Stat(); st.AcquiredConns() != 0 {
		t.Fatalf("InTx kept %d connections after panics", st.AcquiredConns())
	}
	if got := rows(t, base, "charges"); len(got) != 0 {
		t.Fatalf("charges after panics: %v", got)
	}
}

// poolOfOne is a pool of base's database with a single connection: a connection
// InTx failed to give back stalls the next call.
func poolOfOne(t *testing.T, base *pgxpool.Pool) *pgxpool.Pool {
	t.Helper()
	cfg := base.Config()
	cfg.MaxConns = 1
	one, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(one.Close)
	return one
}
