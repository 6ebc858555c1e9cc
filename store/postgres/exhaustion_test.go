package postgres

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/jackc/pgx/v5/pgxpool"
)

// storeKinds are the two stores of the package, each on a migrated schema of the
// test's own.
var storeKinds = []struct {
	name string
	make func(t *testing.T, pool *pgxpool.Pool, opts ...consumer.Option) *Store
}{
	{"Store", func(t *testing.T, pool *pgxpool.Pool, opts ...consumer.Option) *Store {
		t.Helper()
		st, err := NewStore(pool, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}},
	{"PartitionedStore", func(t *testing.T, pool *pgxpool.Pool, opts ...consumer.Option) *Store {
		t.Helper()
		if _, _, err := MaintainPartitions(context.Background(), pool, Partitioning{Window: time.Minute, Ahead: 10 * time.Minute, Keep: time.Hour}); err != nil {
			t.Fatal(err)
		}
		st, err := NewPartitionedStore(pool, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}},
}

// commitCompletion writes key's completion row as InTx does when the handler's
// transaction commits.
func commitCompletion(t *testing.T, pool *pgxpool.Pool, scope string, key consumer.Key, fence int64, result string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), insertCompletion, keyHash(scope, key), scope, fence, []byte(result),
		time.Hour.Microseconds()); err != nil {
		t.Fatal(err)
	}
}

// waitLeaseOut waits until the lease of key's started record has run out on the
// server's clock.
func waitLeaseOut(t *testing.T, st *Store, key consumer.Key) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rec, err := st.Peek(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != "started" {
			t.Fatalf("record %+v, want started", rec)
		}
		if !rec.Now.Before(rec.LeaseUntil) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease of %s did not run out: %+v", key, rec)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A key whose attempts are used up while its effect committed with its
// completion (InTx) is completed with the completion's result, never failed: a
// claim answers COMPLETED where it would have answered EXHAUSTED (or, for a
// record failed after its last attempt but not as permanent, FAILED). Without a
// completion row the same claims answer as before.
func TestExhaustionFindsTransactionalCompletion(t *testing.T) {
	const scope, result = "payments", `"receipt-7"`
	lease := 100 * time.Millisecond
	cases := []struct {
		name string
		// setup leaves key one claim away from the status want (without a
		// completion row), using stores made by mk.
		setup func(t *testing.T, mk func(opts ...consumer.Option) *Store, key consumer.Key)
		want  consumer.ClaimStatus
		// recovered: with a completion row, the claim answers COMPLETED instead.
		recovered bool
	}{
		{"CountedClaimExpiredOnTheLastAttempt", func(t *testing.T, mk func(...consumer.Option) *Store, key consumer.Key) {
			st := mk(consumer.WithMaxAttempts(1))
			if rep := st.Begin(context.Background(), []consumer.Claim{{Key: key, Owner: "crashed", Start: true}})[0]; !rep.Claimed() {
				t.Fatalf("claim = %+v", rep)
			}
			waitLeaseOut(t, st, key) // its owner died after the effect committed
		}, consumer.StatusExhausted, true},
		{"RetryRecordAtMaxAttempts", func(t *testing.T, mk func(...consumer.Option) *Store, key consumer.Key) {
			st := mk(consumer.WithMaxAttempts(5))
			ctx := context.Background()
			rep := st.Begin(ctx, []consumer.Claim{{Key: key, Owner: "a", Start: true}})[0]
			if !rep.Claimed() {
				t.Fatalf("claim = %+v", rep)
			}
			if s := st.Settle(ctx, []consumer.Settlement{{Key: key, Owner: "a", Fence: rep.Fence, Message: "timeout"}})[0]; s.Err != nil || s.Terminal {
				t.Fatalf("settle = %+v", s)
			}
		}, consumer.StatusExhausted, true},
		{"FailedAfterTheLastAttempt", func(t *testing.T, mk func(...consumer.Option) *Store, key consumer.Key) {
			st := mk(consumer.WithMaxAttempts(1))
			ctx := context.Background()
			rep := st.Begin(ctx, []consumer.Claim{{Key: key, Owner: "a", Start: true}})[0]
			if s := st.Settle(ctx, []consumer.Settlement{{Key: key, Owner: "a", Fence: rep.Fence, Message: "timeout"}})[0]; s.Err != nil || !s.Terminal {
				t.Fatalf("settle = %+v", s)
			}
		}, consumer.StatusFailed, true},
		{"FailedAsPermanent", func(t *testing.T, mk func(...consumer.Option) *Store, key consumer.Key) {
			st := mk(consumer.WithMaxAttempts(5))
			ctx := context.Background()
			rep := st.Begin(ctx, []consumer.Claim{{Key: key, Owner: "a", Start: true}})[0]
			if s := st.Settle(ctx, []consumer.Settlement{{Key: key, Owner: "a", Fence: rep.Fence, Message: "bad", Permanent: true}})[0]; s.Err != nil || !s.Terminal {
				t.Fatalf("settle = %+v", s)
			}
		}, consumer.StatusFailed, false},
	}
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			pool := migrated(t)
			mk := func(opts ...consumer.Option) *Store {
				return kind.make(t, pool, append([]consumer.Option{consumer.WithScope(scope), consumer.WithLease(lease)}, opts...)...)
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					ctx := context.Background()
					for _, committed := range []bool{false, true} {
						key := consumer.Key("exhaustion-" + c.name + "-" + strconv.FormatBool(committed))
						c.setup(t, mk, key)
						before, err := mk().Peek(ctx, key)
						if err != nil {
							t.Fatal(err)
						}
						if committed {
							commitCompletion(t, pool, scope, key, before.Fence, result)
						}
						st := mk(consumer.WithMaxAttempts(1))
						rep := st.Begin(ctx, []consumer.Claim{{Key: key, Owner: "next", Start: true}})[0]
						want, wantResult := c.want, ""
						if committed && c.recovered {
							want, wantResult = consumer.StatusCompleted, result
						}
						if rep.Err != nil || rep.Status != want || string(rep.Result) != wantResult {
							t.Fatalf("committed %v: claim = %+v, want %v with result %q", committed, rep, want, wantResult)
						}
						rec, err := st.Peek(ctx, key)
						if err != nil {
							t.Fatal(err)
						}
						if want == consumer.StatusCompleted {
							if rec.State != "completed" || string(rec.Result) != result || rec.Error != "" || rec.Owner != "" ||
								rec.Fence != before.Fence || rec.Attempts != before.Attempts {
								t.Fatalf("record = %+v, want completed with %s, fence %d and attempts %d kept", rec, result, before.Fence, before.Attempts)
							}
							again := st.Begin(ctx, []consumer.Claim{{Key: key, Owner: "later"}})[0]
							if again.Status != consumer.StatusCompleted || string(again.Result) != result {
								t.Fatalf("claim after the recovery = %+v, want COMPLETED", again)
							}
						} else if rec.State != "failed" {
							t.Fatalf("record = %+v, want failed", rec)
						}
					}
				})
			}
		})
	}
}

// The engine's view of the recovery: a delivery of a key whose last counted
// attempt committed its effect and died before the store recorded it ends
// DUPLICATE with the committed result, and its handler does not run.
func TestExhaustedDeliveryOfACommittedEffectIsADuplicate(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			pool := migrated(t)
			ctx := context.Background()
			opts := []consumer.Option{consumer.WithScope("payments"), consumer.WithLease(100 * time.Millisecond), consumer.WithMaxAttempts(2)}
			st := kind.make(t, pool, opts...)
			key := consumer.Key("order-42")
			// Two attempts ran and died, the second after its InTx committed.
			for i, owner := range []string{"first", "second"} {
				rep := st.Begin(ctx, []consumer.Claim{{Key: key, Owner: owner, Start: true}})[0]
				if !rep.Claimed() || rep.Attempts != i+1 {
					t.Fatalf("claim %d = %+v, want attempt %d", i+1, rep, i+1)
				}
				waitLeaseOut(t, st, key)
				if i == 1 {
					commitCompletion(t, pool, "payments", key, rep.Fence, `{"Receipt":"r-42"}`)
				}
			}
			type receipt struct{ Receipt string }
			var runs atomic.Int32
			r := consumer.ExecuteIdempotently(ctx, st, key, nil, func(context.Context) (receipt, error) {
				runs.Add(1)
				return receipt{"again"}, nil
			})
			if r.Outcome != consumer.Duplicate || r.Value.Receipt != "r-42" || runs.Load() != 0 {
				t.Fatalf("delivery: %v %+v (%v), %d runs; want DUPLICATE r-42 and no run", r.Outcome, r.Value, r.Err, runs.Load())
			}
			// Without the completion row, the same history exhausts the key.
			other := consumer.Key("order-43")
			for _, owner := range []string{"first", "second"} {
				st.Begin(ctx, []consumer.Claim{{Key: other, Owner: owner, Start: true}})
				waitLeaseOut(t, st, other)
			}
			r = consumer.ExecuteIdempotently(ctx, st, other, nil, func(context.Context) (receipt, error) {
				runs.Add(1)
				return receipt{"again"}, nil
			})
			if r.Outcome != consumer.Error || !errors.Is(r.Err, consumer.ErrAttemptsExhausted) || runs.Load() != 0 {
				t.Fatalf("delivery without a completion: %v (%v), %d runs; want attempts exhausted", r.Outcome, r.Err, runs.Load())
			}
		})
	}
}
