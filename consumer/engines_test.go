package consumer_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/memory"
)

// Each test here runs one scenario through ExecuteBatch (both completion modes)
// and through a Pipeline, and wants the same outcome from each, exactly: the
// engines share one attempt lifecycle, and these are the places where they once
// disagreed.

// A handler's failure whose settlement met an unreachable store is sent again,
// and counts, even when the caller's context ends during the pause: the handler
// failed on its own before anything was cancelled.
func TestEnginesKeepTheDecisionAcrossResends(t *testing.T) {
	for name, base := range pipelineStores(t, consumer.WithMaxAttempts(3)) {
		for _, eng := range engineRunners {
			t.Run(name+"/"+eng.name, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				s := &failFirstSettle{Store: base, during: func(consumer.Key) { cancel() }}
				var runs atomic.Int32
				keys := keysFor(t, eng, 1)
				rs := eng.run(t, ctx, s, keys, func(context.Context, int) (int, error) {
					runs.Add(1)
					return 0, errDeclined
				})
				wantSummaries(t, eng, rs, summary{Outcome: consumer.Error, Matches: "declined", Action: consumer.Retry, Attempt: 1, Fence: 1})
				rec, err := base.Peek(context.Background(), keys[0])
				if err != nil || rec.State != "retry" || rec.Attempts != 1 {
					t.Fatalf("record %s, %d attempts (%v); want retry after 1 attempt", rec.State, rec.Attempts, err)
				}
				if runs.Load() != 1 || s.calls.of(keys[0]) != 2 {
					t.Fatalf("%d runs, %d settle calls; want 1 run, the failed call and its resend", runs.Load(), s.calls.of(keys[0]))
				}
				again := consumer.ExecuteIdempotently(context.Background(), base, keys[0], []byte(keys[0]),
					func(context.Context) (int, error) { runs.Add(1); return 1, nil })
				if again.Outcome != consumer.Success || again.Attempt != 2 || runs.Load() != 2 {
					t.Fatalf("next delivery: %v %v attempt %d; want SUCCESS as attempt 2", again.Outcome, again.Err, again.Attempt)
				}
			})
		}
	}
}

// A handler cut short by its caller's cancellation gives its claim back even when
// the store takes longer than the lease margin to answer: the claim is live, and
// a release given up early would make the next delivery wait out the lease.
func TestEnginesWaitForTheReleaseOfALiveClaim(t *testing.T) {
	lease := 2 * time.Second // margin 220ms, under the release's 300ms
	for name, base := range pipelineStores(t, consumer.WithLease(lease)) {
		for _, eng := range engineRunners {
			t.Run(name+"/"+eng.name, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				s := &slowRelease{Store: base, delay: 300 * time.Millisecond}
				keys := keysFor(t, eng, 1)
				rs := eng.run(t, ctx, s, keys, func(hctx context.Context, _ int) (int, error) {
					cancel() // the adapter revokes the partition
					<-hctx.Done()
					return 0, hctx.Err()
				})
				wantSummaries(t, eng, rs, summary{Outcome: consumer.Error, Matches: "interrupted canceled not-an-attempt",
					Action: consumer.Retry, Attempt: 1, Fence: 1})
				if n := s.applied.of(keys[0]); n != 1 {
					t.Fatalf("%d claims released, want 1", n)
				}
				wantRunsOnceMore(t, base, keys[0])
			})
		}
	}
}

// A message that never ran names the loss of its lease before its caller's
// cancellation, as a handler cut short does.
func TestEnginesNameALostLeaseFirst(t *testing.T) {
	lost := &lostLeases{}
	for name, base := range pipelineStores(t, consumer.WithLease(3*time.Second), consumer.WithObserver(lost)) {
		for _, eng := range engineRunners {
			t.Run(name+"/"+eng.name, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				s := &refuseRenewals{Store: base, lost: lost}
				keys := keysFor(t, eng, 2)
				var runs atomic.Int32
				rs := eng.run(t, ctx, s, keys, func(hctx context.Context, i int) (int, error) {
					runs.Add(1)
					<-hctx.Done()      // the first renewal is refused
					lost.wait(keys[1]) // the second message's lease is lost too
					cancel()           // and then the caller gives up
					return 0, hctx.Err()
				})
				wantSummaries(t, eng, rs,
					summary{Outcome: consumer.Error, Matches: "lease-lost not-an-attempt", Action: consumer.Retry, Attempt: 1, Fence: 1},
					summary{Outcome: consumer.Error, Matches: "not-run lease-lost not-an-attempt", Action: consumer.Retry, Attempt: 1, Fence: 1})
				if runs.Load() != 1 {
					t.Fatalf("%d handlers ran, want 1", runs.Load())
				}
				for _, k := range keys {
					wantRunsOnceMore(t, base, k)
				}
			})
		}
	}
}

// A handler whose taken-over claim loses its lease while the claim is being marked
// counted does not start: a handler runs only while its claim is live.
func TestEnginesStartNothingOnALostLease(t *testing.T) {
	lease := time.Second
	lost := &lostLeases{}
	for name, base := range pipelineStores(t, consumer.WithLease(lease), consumer.WithObserver(lost)) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			// Every engine's key was claimed by a member that died before its handler
			// started; wait until those leases have run out on the store.
			for _, eng := range engineRunners {
				k := keysFor(t, eng, 1)[0]
				if rep := base.Begin(ctx, []consumer.Claim{{Key: k, Owner: "dead", Fingerprint: consumer.FingerprintOf([]byte(k))}})[0]; !rep.Claimed() {
					t.Fatalf("claim %s: %+v", k, rep)
				}
			}
			for _, eng := range engineRunners {
				k := keysFor(t, eng, 1)[0]
				testenv.Eventually(t, 10*lease, "the dead member's lease to run out", func() bool {
					rec, err := base.Peek(ctx, k)
					return err == nil && !rec.LeaseUntil.After(rec.Now)
				})
			}
			for _, eng := range engineRunners {
				s := &refuseRenewals{Store: base, lost: lost, holdMarks: true}
				var runs atomic.Int32
				rs := eng.run(t, ctx, s, keysFor(t, eng, 1), func(context.Context, int) (int, error) {
					runs.Add(1)
					return 1, nil
				})
				wantSummaries(t, eng, rs, summary{Outcome: consumer.Error, Matches: "not-run lease-lost not-an-attempt",
					Action: consumer.Retry, Attempt: 1, Fence: 2})
				if runs.Load() != 0 {
					t.Fatalf("%s: the handler ran %d times on a lost lease", eng.name, runs.Load())
				}
			}
		})
	}
}

// A store whose Settle panics (a bug in a user's wrapper) gives every message
// the panic as its error, on every engine; the process goes on.
func TestEnginesContainASettlePanic(t *testing.T) {
	for name, base := range pipelineStores(t, consumer.WithLease(time.Second)) {
		for _, eng := range engineRunners {
			t.Run(name+"/"+eng.name, func(t *testing.T) {
				var runs atomic.Int32
				rs := eng.run(t, context.Background(), panicStore{base}, keysFor(t, eng, 3), func(_ context.Context, i int) (int, error) {
					runs.Add(1)
					return i + 1, nil
				})
				want := summary{Outcome: consumer.Error, Matches: "panic", Action: consumer.Retry, Attempt: 1, Fence: 1}
				wantSummaries(t, eng, rs, want, want, want)
				if runs.Load() != 3 {
					t.Fatalf("%d handlers ran, want 3", runs.Load())
				}
			})
		}
	}
}

// An observer whose start hook panics keeps the handler from starting: nothing
// is recorded, the claim is given back, and the next delivery runs it as its
// first attempt. One whose end hook panics changes nothing: the handler ran and
// its completion is stored.
func TestEnginesContainHookPanics(t *testing.T) {
	hooks := &panickyHooks{}
	for name, base := range pipelineStores(t, consumer.WithObserver(hooks)) {
		for _, eng := range engineRunners {
			t.Run(name+"/"+eng.name+"/start", func(t *testing.T) {
				hooks.atStart.Store(true)
				defer hooks.atStart.Store(false)
				var runs atomic.Int32
				keys := keysFor(t, eng, 1)
				rs := eng.run(t, context.Background(), base, keys, func(context.Context, int) (int, error) {
					runs.Add(1)
					return 7, nil
				})
				wantSummaries(t, eng, rs, summary{Outcome: consumer.Error, Matches: "not-run panic not-an-attempt",
					Action: consumer.Retry, Attempt: 1, Fence: 1})
				if runs.Load() != 0 {
					t.Fatalf("the handler ran %d times", runs.Load())
				}
				hooks.atStart.Store(false)
				wantRunsOnceMore(t, base, keys[0])
			})
			t.Run(name+"/"+eng.name+"/end", func(t *testing.T) {
				hooks.atEnd.Store(true)
				defer hooks.atEnd.Store(false)
				var runs atomic.Int32
				key := keysFor(t, eng, 1)[0]
				rs := eng.run(t, context.Background(), base, []consumer.Key{key}, func(context.Context, int) (int, error) {
					runs.Add(1)
					return 7, nil
				})
				wantSummaries(t, eng, rs, summary{Outcome: consumer.Success, Value: 7, Action: consumer.Ack, Attempt: 1, Fence: 1})
				hooks.atEnd.Store(false)
				dup := consumer.ExecuteIdempotently(context.Background(), base, key, []byte(key),
					func(context.Context) (int, error) { runs.Add(1); return 0, nil })
				if dup.Outcome != consumer.Duplicate || dup.Value != 7 || runs.Load() != 1 {
					t.Fatalf("next delivery: %v %d after %d runs; want DUPLICATE 7 after 1", dup.Outcome, dup.Value, runs.Load())
				}
			})
		}
	}
}

// A message left unstarted when its caller gives up is not run, and its error
// matches the caller's cancellation cause, on every engine and under a lock too.
func TestEnginesNameTheCallersCause(t *testing.T) {
	locked := engineRunner{name: "ExecuteBatch-locked"}
	for name, base := range pipelineStores(t) {
		lockedStore := must(memory.NewStore(consumer.WithLock(fixedLock(true))))
		for _, eng := range append(engineRunners[:len(engineRunners):len(engineRunners)], locked) {
			t.Run(name+"/"+eng.name, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var runs atomic.Int32
				fn := func(_ context.Context, i int) (int, error) {
					runs.Add(1)
					cancel()
					return 1, nil
				}
				second := summary{Outcome: consumer.Error, Matches: "not-run canceled not-an-attempt", Action: consumer.Retry, Attempt: 1, Fence: 1}
				var rs []consumer.Result[int]
				if eng.run == nil { // under a lock, an item after the cancellation is not even claimed
					rs = consumer.ExecuteBatch(ctx, lockedStore, batchOf(keysFor(t, eng, 2)),
						func(ctx context.Context, i int, _ consumer.BatchItem) (int, error) { return fn(ctx, i) })
					second.Attempt, second.Fence = 0, 0
				} else {
					rs = eng.run(t, ctx, base, keysFor(t, eng, 2), fn)
				}
				wantSummaries(t, eng, rs, summary{Outcome: consumer.Success, Value: 1, Action: consumer.Ack, Attempt: 1, Fence: 1}, second)
				if runs.Load() != 1 {
					t.Fatalf("%d handlers ran, want 1", runs.Load())
				}
			})
		}
	}
}
