package postgres

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/consumer/consumertest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestConformance runs the suite every consumer.Store passes, each store in a
// schema of its own.
func TestConformance(t *testing.T) {
	consumertest.Run(t, func(t *testing.T, opts ...consumer.Option) (consumer.Store, error) {
		pool := schemaPool(t)
		if err := Migrate(context.Background(), pool); err != nil {
			return nil, err
		}
		return NewStore(pool, opts...)
	})
}

// 64 goroutines deliver 1,000 keys 5 times each: every key's handler runs once.
func TestRaceExactlyOnce(t *testing.T) {
	store, err := NewStore(migrated(t), consumer.WithScope("race"))
	if err != nil {
		t.Fatal(err)
	}
	raceExactlyOnce(t, store)
}

// raceExactlyOnce has 64 goroutines deliver 1,000 keys 5 times each, then a second
// set deliver them again, shifted, so that deliveries collide: every key's handler
// must have run once.
func raceExactlyOnce(t *testing.T, store consumer.Store) {
	const workers, keys, deliveries = 64, 1000, 5
	var runs [keys]atomic.Int32
	var wg sync.WaitGroup
	ctx := context.Background()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range deliveries {
				for k := w; k < keys; k += workers {
					_ = d
					key := consumer.Key(fmt.Sprintf("k-%04d", k))
					for {
						r := consumer.ExecuteIdempotently(ctx, store, key, nil, func(context.Context) (int, error) {
							runs[k].Add(1)
							return k, nil
						})
						if r.Outcome != consumer.InProgress && r.Outcome != consumer.Error {
							break
						}
					}
				}
			}
		}()
	}
	// the same keys from a second set of workers, shifted, so deliveries collide
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := (w + 7) % workers; k < keys; k += workers {
				key := consumer.Key(fmt.Sprintf("k-%04d", k))
				for {
					r := consumer.ExecuteIdempotently(ctx, store, key, nil, func(context.Context) (int, error) {
						runs[k].Add(1)
						return k, nil
					})
					if r.Outcome != consumer.InProgress && r.Outcome != consumer.Error {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	for k := range keys {
		if n := runs[k].Load(); n != 1 {
			t.Fatalf("key %d ran %d times", k, n)
		}
	}
}

func TestStoreBadInput(t *testing.T) {
	if _, err := NewStore(nil); err == nil {
		t.Fatal("nil database accepted")
	}
	var nilPool *pgxpool.Pool
	if _, err := NewStore(nilPool); err == nil {
		t.Fatal("nil pool accepted")
	}
	store, err := NewStore(schemaPool(t), consumer.WithScope("x")) // no Migrate
	if err != nil {
		t.Fatal(err)
	}
	r := consumer.ExecuteIdempotently(context.Background(), store, "k", nil, func(context.Context) (int, error) { return 1, nil })
	if r.Err == nil || !strings.Contains(r.Err.Error(), "Migrate") {
		t.Fatalf("missing table: %v", r.Err)
	}
	var nilStore *Store
	if reps := nilStore.Begin(context.Background(), []consumer.Claim{{Key: "k", Owner: "o"}}); reps[0].Err == nil {
		t.Fatal("nil store answered a claim")
	}
	_ = testenv.PostgresDSN
}

// The memory store and the PostgreSQL store answer alike: thousands of random
// operations, batches naming a key twice among them, every reply and record compared.
func TestMemoryAndPostgresAgree(t *testing.T) {
	pool := migrated(t)
	var n atomic.Int32
	consumertest.Agree(t, func(t *testing.T, opts ...consumer.Option) (consumer.Store, error) {
		return NewStore(pool, append(opts, consumer.WithScope(fmt.Sprint("agree-", n.Add(1))))...)
	})
}

// An error text PostgreSQL's text type refuses (NUL, invalid UTF-8) is stored
// with those bytes replaced, and the other items of the settlement are settled.
func TestUnstorableErrorText(t *testing.T) {
	store, err := NewStore(migrated(t), consumer.WithScope("text"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	reps := store.Begin(ctx, []consumer.Claim{{Key: "a", Owner: "o"}, {Key: "b", Owner: "o"}})
	got := store.Settle(ctx, []consumer.Settlement{
		{Key: "a", Owner: "o", Fence: reps[0].Fence, Message: "bad \x00 byte and \xff"},
		{Key: "b", Owner: "o", Fence: reps[1].Fence, Complete: true, Result: []byte(`"ok"`)},
	})
	if got[0].Err != nil || got[1].Err != nil {
		t.Fatalf("settle: %v, %v", got[0].Err, got[1].Err)
	}
	rec, err := store.Peek(ctx, "a")
	if err != nil || rec.State != "retry" || rec.Error != "bad \uFFFD byte and \uFFFD" {
		t.Fatalf("a: %s %q %v", rec.State, rec.Error, err)
	}
	if rec, _ := store.Peek(ctx, "b"); rec.State != "completed" {
		t.Fatalf("b: %s", rec.State)
	}
}

// Reap deletes only rows that are still expired when it gets to them: a row a
// claim revives in place while Reap waits for it stays, and holds the claim.
func TestReapLeavesARevivedRow(t *testing.T) {
	pool := migrated(t)
	ctx := context.Background()
	store, err := NewStore(pool, consumer.WithScope("reap"), consumer.WithLease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if r := store.Begin(ctx, []consumer.Claim{{Key: "k", Owner: "a"}}); r[0].Status != consumer.StatusAcquired {
		t.Fatalf("first claim: %+v", r[0])
	}
	if _, err := pool.Exec(ctx, `UPDATE idemkit_records SET expires_ms = 0, lease_ms = 0`); err != nil { // expire it
		t.Fatal(err)
	}
	// Hold the row as a claim reviving it would, then let Reap run against it.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE idemkit_records SET expires_ms = (extract(epoch FROM clock_timestamp()) * 1000)::bigint + 600000,
		lease_ms = (extract(epoch FROM clock_timestamp()) * 1000)::bigint + 60000, owner = 'b', state = 'started'`); err != nil {
		t.Fatal(err)
	}
	reaped := make(chan int64, 1)
	go func() {
		n, err := Reap(ctx, pool, 10)
		if err != nil {
			t.Error(err)
		}
		reaped <- n
	}()
	time.Sleep(300 * time.Millisecond) // Reap has read the expired row and waits for the lock
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := <-reaped; n != 0 {
		t.Fatalf("Reap deleted %d rows, among them the revived one", n)
	}
	if r := store.Begin(ctx, []consumer.Claim{{Key: "k", Owner: "c"}}); r[0].Status != consumer.StatusInProgress {
		t.Fatalf("a third owner's claim: %v (fence %d)", r[0].Status, r[0].Fence)
	}
}
