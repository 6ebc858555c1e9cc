package idemkittest_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/idemkittest"
	"github.com/idemkit/idemkit/store/memory"
)

// The deliberately non-idempotent handler (a counter incremented before
// idemkit records the completion, its context ignored) fails
// RequireExactlyOnce: crash after effect first, and each failure says what the
// issue's shape asks, through a fake testing.TB.
func TestNonIdempotentHandlerFails(t *testing.T) {
	var c counter
	tb := &fakeTB{}
	var rep idemkittest.Report
	tb.run(func() {
		kit := idemkittest.New[string](tb, idemkittest.WithEffects(c.count))
		rep = kit.RequireExactlyOnce(context.Background(), msg, c.plain)
	})
	if tb.fatal != "" {
		t.Fatalf("the kit stopped the test: %s", tb.fatal)
	}
	want := []idemkittest.Scenario{idemkittest.CrashAfterEffect, idemkittest.LeaseLost, idemkittest.StoreDownAtCompletion}
	if got := failedScenarios(rep); !slices.Equal(got, want) {
		t.Fatalf("failed scenarios %v, want %v\n%s", got, want, rep)
	}
	if len(tb.errors) != len(want) {
		t.Fatalf("%d failures reported to the test, want %d: %q", len(tb.errors), len(want), tb.errors)
	}
	containsAll(t, "the crash-after-effect failure", tb.errors[0],
		"idemkittest: crash after effect, before completion: effect ran 2 times, want 1",
		"the worker died after the handler's effect and before its completion reached the store",
		"postgres.InTx", "the fence", "handler ran 2 times",
		"1 ERROR fence 1 (crashed after the handler, before its completion), 2 SUCCESS fence 2 (redelivered after the lease), 3 DUPLICATE fence 2")
	containsAll(t, "the lease-lost failure", tb.errors[1],
		"idemkittest: lease lost mid-handler, second owner runs: effect ran 2 times, want 1",
		"(fence 1, then 2)", "return as soon as ctx is done")
	containsAll(t, "the store-down failure", tb.errors[2],
		"idemkittest: store down at the completion: effect ran 2 times, want 1", "lease (1s)")
	var warned []string
	for _, l := range tb.logs {
		if strings.HasPrefix(l, "idemkittest: warning: ") {
			warned = append(warned, l)
		}
	}
	if len(warned) != 1 {
		t.Fatalf("%d warnings logged, want 1 (after the retention): %q", len(warned), tb.logs)
	}
	containsAll(t, "the retention warning", warned[0],
		"redelivery after the retention: effect ran 2 times", "retention (24h0m0s)", "consumer.WithRetention")
	for _, v := range rep.Verdicts {
		wantEffects, wantRuns := 1, 1
		if v.Failure != "" || v.Warning != "" {
			wantEffects, wantRuns = 2, 2
		}
		if v.Effects != wantEffects || v.Runs != wantRuns {
			t.Errorf("%s: effects %d, handler runs %d; want %d and %d", v.Scenario, v.Effects, v.Runs, wantEffects, wantRuns)
		}
	}
}

// The lease-lost scenario tells a handler that ignores its cancelled context
// from one that returns: everything else equal, only the first fails, and the
// first owner's completion is refused in both.
func TestLeaseLostCatchesHandlerIgnoringCancellation(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler func(*counter) func(context.Context) (string, error)
		effects int
	}{
		{"ignores ctx", func(c *counter) func(context.Context) (string, error) { return c.plain }, 2},
		{"returns on ctx", func(c *counter) func(context.Context) (string, error) { return c.careful }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c counter
			kit := idemkittest.New[string](t, idemkittest.WithEffects(c.count))
			rep := kit.Check(context.Background(), msg, tc.handler(&c), idemkittest.LeaseLost)
			v, ok := rep.Verdict(idemkittest.LeaseLost)
			if !ok || rep.Err != nil {
				t.Fatalf("no verdict: %v", rep.Err)
			}
			if v.Effects != tc.effects || v.Runs != 2 || v.Passed() != (tc.effects == 1) {
				t.Fatalf("effects %d, runs %d, passed %v; want %d, 2, %v: %s", v.Effects, v.Runs, v.Passed(), tc.effects,
					tc.effects == 1, v.Failure)
			}
			first := v.Deliveries[0]
			if first.Outcome != consumer.Error || !errors.Is(first.Err, consumer.ErrLeaseLost) || first.Fence != 1 {
				t.Fatalf("first owner: %v, want ERROR ErrLeaseLost at fence 1", first)
			}
			if second := v.Deliveries[1]; second.Outcome != consumer.Success || second.Fence != 2 {
				t.Fatalf("second owner: %v, want SUCCESS at fence 2", second)
			}
		})
	}
}

// A handler whose effect is a row the key owns, written under the fence,
// passes every scenario; after the retention its fence restarts at 1 and the
// row refuses the write, which the warning names.
func TestFencedHandlerPasses(t *testing.T) {
	f := newFenced()
	resets := 0
	kit := idemkittest.New[string](t, idemkittest.WithEffects(f.count),
		idemkittest.WithReset(func() { resets++; f.reset() }))
	rep := kit.RequireExactlyOnce(context.Background(), msg, f.handle)
	if resets != len(idemkittest.Scenarios()) {
		t.Errorf("reset %d times, want once per scenario (%d)", resets, len(idemkittest.Scenarios()))
	}
	v, _ := rep.Verdict(idemkittest.AfterRetention)
	containsAll(t, "the retention warning", v.Warning, "the last delivery ended DUPLICATE", "stale writer: fence 1, the row has 1")
}

// A store that answers a stale owner's completion as applied (no
// compare-and-set on the owner token) is named in the lease-lost scenario,
// before the effect count.
func TestStoreBugIsNamed(t *testing.T) {
	clock := idemkittest.NewClock(time.Now())
	var c counter
	kit := idemkittest.New[string](t, idemkittest.WithEffects(c.count), idemkittest.WithClock(clock),
		idemkittest.WithStore(func(scope string) (consumer.Store, error) {
			s, err := memory.NewStore(consumer.WithScope(scope), consumer.WithLease(time.Second), memory.WithClock(clock))
			return &noOwnerCheck{Store: s}, err
		}))
	rep := kit.Check(context.Background(), msg, c.plain, idemkittest.LeaseLost)
	v, _ := rep.Verdict(idemkittest.LeaseLost)
	containsAll(t, "the failure", v.Failure,
		"lease lost mid-handler, second owner runs: the first owner's completion (fence 1) was accepted after a second owner (fence 2) took the key over",
		"compare-and-set on the owner token")
}

// noOwnerCheck answers every refused settlement as applied.
type noOwnerCheck struct{ *memory.Store }

func (s *noOwnerCheck) Settle(ctx context.Context, items []consumer.Settlement) []consumer.SettleReply {
	reps := s.Store.Settle(ctx, items)
	for i := range reps {
		if errors.Is(reps[i].Err, consumer.ErrLeaseLost) {
			reps[i].Err = nil
		}
	}
	return reps
}

// Under WithFailOpen the handler runs unguarded while the store is down, and
// the next delivery runs it again: the failure says so.
func TestFailOpenStoreDownAtClaim(t *testing.T) {
	clock := idemkittest.NewClock(time.Now())
	var c counter
	kit := idemkittest.New[string](t, idemkittest.WithEffects(c.count), idemkittest.WithClock(clock),
		idemkittest.WithStore(func(scope string) (consumer.Store, error) {
			return memory.NewStore(consumer.WithScope(scope), consumer.WithFailOpen(true), memory.WithClock(clock))
		}))
	rep := kit.Check(context.Background(), msg, c.careful, idemkittest.StoreDownAtClaim)
	v, _ := rep.Verdict(idemkittest.StoreDownAtClaim)
	containsAll(t, "the failure", v.Failure,
		"store down at the claim: effect ran 2 times, want 1",
		"WithFailOpen ran the handler unguarded", "leave the store failing closed",
		"1 SUCCESS (the store was down), 2 SUCCESS fence 1 (the last delivery)")
}

// Each scenario runs alone, and only it: Run with one scenario reports one verdict.
func TestRunOneScenario(t *testing.T) {
	var c counter
	kit := idemkittest.New[string](t, idemkittest.WithEffects(c.count))
	rep := kit.Run(context.Background(), msg, c.plain, idemkittest.ConcurrentDeliveries)
	if len(rep.Verdicts) != 1 || rep.Verdicts[0].Scenario != idemkittest.ConcurrentDeliveries {
		t.Fatalf("verdicts %v, want the concurrent one only", rep.Verdicts)
	}
	v := rep.Verdicts[0]
	var success, inProgress, duplicate int
	for _, d := range v.Deliveries {
		switch d.Outcome {
		case consumer.Success:
			success++
		case consumer.InProgress:
			inProgress++
		case consumer.Duplicate:
			duplicate++
		}
	}
	// Eight at once: one SUCCESS and seven IN_PROGRESS (the holder waited for all
	// eight claims); the seven again, and the last delivery: eight DUPLICATE.
	if success != 1 || inProgress != 7 || duplicate != 8 || v.Effects != 1 || v.Runs != 1 {
		t.Fatalf("%d SUCCESS, %d IN_PROGRESS, %d DUPLICATE, effects %d, runs %d; want 1, 7, 8, 1, 1",
			success, inProgress, duplicate, v.Effects, v.Runs)
	}
}

// The kit's own bad input stops the test with a message that says what to
// change; Check reports the same in Report.Err.
func TestBadInput(t *testing.T) {
	var c counter
	effects := idemkittest.WithEffects(c.count)
	for _, tc := range []struct {
		name string
		opts []idemkittest.Option
		msg  idemkittest.Message
		fn   func(context.Context) (string, error)
		sc   []idemkittest.Scenario
		want string
	}{
		{"no effects", nil, msg, c.plain, nil, "idemkittest: New: no effect count: give WithEffects a function"},
		{"nil option", []idemkittest.Option{effects, nil}, msg, c.plain, nil, "idemkittest: New: nil option"},
		{"clock without store", []idemkittest.Option{effects, idemkittest.WithClock(idemkittest.NewClock(time.Now()))}, msg, c.plain, nil,
			"WithClock without WithStore"},
		{"empty key", []idemkittest.Option{effects}, idemkittest.Message{}, c.plain, nil, "idemkittest: message: consumer: invalid key: empty key"},
		{"nil handler", []idemkittest.Option{effects}, msg, nil, nil, "idemkittest: nil handler"},
		{"unknown scenario", []idemkittest.Option{effects}, msg, c.plain, []idemkittest.Scenario{99}, "idemkittest: unknown scenario(99)"},
		{"store error", []idemkittest.Option{effects, idemkittest.WithStore(func(string) (consumer.Store, error) {
			return nil, errors.New("no server")
		})}, msg, c.plain, nil, "idemkittest: duplicate after completion: making the store: no server"},
		{"nil store", []idemkittest.Option{effects, idemkittest.WithStore(func(string) (consumer.Store, error) {
			return (*memory.Store)(nil), nil
		})}, msg, c.plain, nil, "the WithStore function returned a nil store"},
		{"scope ignored", []idemkittest.Option{effects, idemkittest.WithStore(func(string) (consumer.Store, error) {
			return memory.NewStore(consumer.WithScope("payments"))
		})}, msg, c.plain, nil, `the store's scope is "payments", not the "idemkittest-`},
		{"lock", []idemkittest.Option{effects, idemkittest.WithStore(func(scope string) (consumer.Store, error) {
			return memory.NewStore(consumer.WithScope(scope), consumer.WithLease(time.Second), consumer.WithLock(noLocker{}))
		})}, msg, c.plain, nil, "the store has WithLock"},
		{"long lease", []idemkittest.Option{effects, idemkittest.WithStore(func(scope string) (consumer.Store, error) {
			return memory.NewStore(consumer.WithScope(scope))
		})}, msg, c.plain, nil, "the store's lease is 30s: on a store whose clock the kit does not move, it waits leases out; give the store consumer.WithLease(time.Second)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := &fakeTB{}
			tb.run(func() {
				kit := idemkittest.New[string](tb, tc.opts...)
				kit.Run(context.Background(), tc.msg, tc.fn, tc.sc...)
				t.Error("the kit did not stop the test")
			})
			if !strings.Contains(tb.fatal, tc.want) {
				t.Fatalf("Fatalf %q, want it to say %q", tb.fatal, tc.want)
			}
			rep := idemkittest.New[string](nil, tc.opts...).Check(context.Background(), tc.msg, tc.fn, tc.sc...)
			if rep.Err == nil || !strings.Contains("idemkittest: "+rep.Err.Error(), tc.want) || !rep.Failed() {
				t.Fatalf("Check: %v, want an error saying %q", rep.Err, tc.want)
			}
		})
	}
	var nilKit *idemkittest.Kit[string]
	if rep := nilKit.Check(context.Background(), msg, c.plain); rep.Err == nil {
		t.Fatal("Check on a nil kit reported no error")
	}
}

// A cancelled context stops the run before the next scenario.
func TestCancelledContext(t *testing.T) {
	var c counter
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rep := idemkittest.New[string](nil, idemkittest.WithEffects(c.count)).Check(ctx, msg, c.plain)
	if !errors.Is(rep.Err, context.Canceled) || len(rep.Verdicts) != 0 || c.count() != 0 {
		t.Fatalf("report %v, %d verdicts, %d effects; want context.Canceled and nothing run", rep.Err, len(rep.Verdicts), c.count())
	}
}

// noLocker is a consumer.Locker that never gets its lock.
type noLocker struct{}

func (noLocker) TryAcquire(ctx context.Context, _ string) (context.Context, func(), bool, error) {
	return ctx, func() {}, false, nil
}
