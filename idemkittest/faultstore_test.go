package idemkittest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/idemkittest"
	"github.com/idemkit/idemkit/store/memory"
)

func faultStore(t *testing.T) (*idemkittest.FaultStore, *memory.Store, *idemkittest.Clock) {
	t.Helper()
	clock := idemkittest.NewClock(time.Now())
	inner, err := memory.NewStore(consumer.WithScope("faults"), consumer.WithLease(time.Second), memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	fs, err := idemkittest.NewFaultStore(inner)
	if err != nil {
		t.Fatal(err)
	}
	return fs, inner, clock
}

func inject(t *testing.T, fs *idemkittest.FaultStore, f idemkittest.Fault) {
	t.Helper()
	if err := fs.Inject(f); err != nil {
		t.Fatal(err)
	}
}

func ok(context.Context) (string, error) { return "ok", nil }

// Nth and Count pick the calls: the second and third claims fail, the first
// and fourth do not; the failure is a store outage, not applied, so nothing is
// claimed and no handler runs.
func TestFaultNthAndCount(t *testing.T) {
	fs, _, _ := faultStore(t)
	inject(t, fs, idemkittest.Fault{Op: idemkittest.OpBegin, Nth: 2, Count: 2})
	ctx := context.Background()
	runs := 0
	h := func(context.Context) (string, error) { runs++; return "ok", nil }
	var outcomes []string
	for i := 0; i < 4; i++ {
		r := consumer.ExecuteIdempotently(ctx, fs, consumer.Key("k"+string(rune('0'+i))), nil, h)
		outcomes = append(outcomes, r.Outcome.String())
		if r.Outcome == consumer.Error && !errors.Is(r.Err, idemkittest.ErrInjected) {
			t.Fatalf("claim %d: %v, want ErrInjected", i+1, r.Err)
		}
	}
	if got := strings.Join(outcomes, " "); got != "SUCCESS ERROR ERROR SUCCESS" || runs != 2 {
		t.Fatalf("outcomes %s, runs %d; want SUCCESS ERROR ERROR SUCCESS and 2", got, runs)
	}
	if n := fs.Calls(idemkittest.OpBegin); n != 4 {
		t.Fatalf("Calls(OpBegin) = %d, want 4", n)
	}
}

// A fault on one key hits only that key's items of a batch: with its
// completions and renewals failing, idemkit gives the key up once its lease is
// about to run out; the other keys complete.
func TestFaultKeyInBatch(t *testing.T) {
	fs, inner, _ := faultStore(t)
	inject(t, fs, idemkittest.Fault{Op: idemkittest.OpSettle, Key: "b", Count: idemkittest.Forever})
	inject(t, fs, idemkittest.Fault{Op: idemkittest.OpExtend, Key: "b", Count: idemkittest.Forever})
	rs := consumer.ExecuteBatch(context.Background(), fs,
		[]consumer.BatchItem{{Key: "a"}, {Key: "b"}, {Key: "c"}},
		func(context.Context, int, consumer.BatchItem) (string, error) { return "ok", nil })
	for i, want := range []consumer.Outcome{consumer.Success, consumer.Error, consumer.Success} {
		if rs[i].Outcome != want {
			t.Errorf("item %s: %v (%v), want %v", rs[i].Key, rs[i].Outcome, rs[i].Err, want)
		}
	}
	for key, want := range map[consumer.Key]string{"a": "completed", "b": "started", "c": "completed"} {
		rec, err := inner.Peek(context.Background(), key)
		if err != nil || rec.State != want {
			t.Errorf("record %s: %q (%v), want %q", key, rec.State, err, want)
		}
	}
}

// LoseReply applies the completion and loses its answer: idemkit sends it
// again, the store answers as the first time, and the outcome is SUCCESS with
// one run; the store saw two settlements.
func TestFaultLoseReply(t *testing.T) {
	fs, inner, _ := faultStore(t)
	inject(t, fs, idemkittest.Fault{Op: idemkittest.OpSettle, Action: idemkittest.LoseReply})
	runs := 0
	r := consumer.ExecuteIdempotently(context.Background(), fs, "k", nil, func(context.Context) (string, error) {
		runs++
		return "ok", nil
	})
	if r.Outcome != consumer.Success || runs != 1 || fs.Calls(idemkittest.OpSettle) != 2 {
		t.Fatalf("%v (%v), runs %d, settle calls %d; want SUCCESS, 1, 2", r.Outcome, r.Err, runs, fs.Calls(idemkittest.OpSettle))
	}
	if rec, _ := inner.Peek(context.Background(), "k"); rec.State != "completed" {
		t.Fatalf("record %q, want completed", rec.State)
	}
}

// DelayCall holds a call back; a call whose context ends first does not go.
func TestFaultDelay(t *testing.T) {
	fs, _, _ := faultStore(t)
	inject(t, fs, idemkittest.Fault{Op: idemkittest.OpPeek, Action: idemkittest.DelayCall, Delay: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	go cancel()
	if _, err := fs.Peek(ctx, "k"); !errors.Is(err, consumer.ErrStoreUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("peek with its context cancelled during the delay: %v, want a store outage wrapping context.Canceled", err)
	}
	if rec, err := fs.Peek(context.Background(), "k"); err != nil || rec.Found {
		t.Fatalf("the next peek: %v found %v; want no delay and no record", err, rec.Found)
	}
}

// An attempt that crashes after its handler leaves its record started until its
// lease runs out; the next owner then takes it over and the handler runs again.
// A fault with Crash does the same from the store call it hits.
func TestFaultCrash(t *testing.T) {
	for _, tc := range []struct {
		name  string
		crash func(fs *idemkittest.FaultStore, in consumer.Info)
	}{
		{"Crash", func(fs *idemkittest.FaultStore, in consumer.Info) { fs.Crash(in.Key, in.Fence) }},
		{"Fault.Crash", func(fs *idemkittest.FaultStore, in consumer.Info) {
			_ = fs.Inject(idemkittest.Fault{Op: idemkittest.OpSettle, Key: in.Key, Fence: in.Fence, Crash: true})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, inner, clock := faultStore(t)
			ctx := context.Background()
			runs := 0
			r := consumer.ExecuteIdempotently(ctx, fs, "k", nil, func(ctx context.Context) (string, error) {
				runs++
				in, _ := consumer.InfoFromContext(ctx)
				tc.crash(fs, in)
				return "ok", nil
			})
			if !errors.Is(r.Err, consumer.ErrLeaseLost) {
				t.Fatalf("the crashed delivery: %v (%v), want ErrLeaseLost in the test process", r.Outcome, r.Err)
			}
			rec, _ := inner.Peek(ctx, "k")
			if rec.State != "started" || rec.Fence != 1 {
				t.Fatalf("record after the crash: %q fence %d, want started fence 1", rec.State, rec.Fence)
			}
			if r := consumer.ExecuteIdempotently(ctx, fs, "k", nil, ok); r.Outcome != consumer.InProgress {
				t.Fatalf("redelivery within the lease: %v, want IN_PROGRESS", r.Outcome)
			}
			clock.Advance(rec.LeaseUntil.Sub(rec.Now) + time.Millisecond)
			r = consumer.ExecuteIdempotently(ctx, fs, "k", nil, func(ctx context.Context) (string, error) { runs++; return "ok", nil })
			if r.Outcome != consumer.Success || r.Fence != 2 || runs != 2 {
				t.Fatalf("redelivery after the lease: %v fence %d, runs %d; want SUCCESS fence 2, 2 runs", r.Outcome, r.Fence, runs)
			}
		})
	}
}

// A fault out of range is refused with a message that says what to give.
func TestFaultBadInput(t *testing.T) {
	fs, _, _ := faultStore(t)
	for _, tc := range []struct {
		f    idemkittest.Fault
		want string
	}{
		{idemkittest.Fault{}, "fault op 0: use OpBegin"},
		{idemkittest.Fault{Op: idemkittest.OpBegin, Action: 9}, "fault action 9"},
		{idemkittest.Fault{Op: idemkittest.OpBegin, Nth: -1}, "fault Nth -1"},
		{idemkittest.Fault{Op: idemkittest.OpBegin, Count: -2}, "fault Count -2"},
		{idemkittest.Fault{Op: idemkittest.OpBegin, Action: idemkittest.DelayCall}, "DelayCall with Delay 0s"},
		{idemkittest.Fault{Op: idemkittest.OpBegin, Action: idemkittest.DelayCall, Delay: time.Second, Crash: true}, "DelayCall with Crash"},
		{idemkittest.Fault{Op: idemkittest.OpSettle, Fence: -1}, "fault fence -1"},
	} {
		if err := fs.Inject(tc.f); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Inject(%+v): %v, want %q", tc.f, err, tc.want)
		}
	}
	if _, err := idemkittest.NewFaultStore(nil); err == nil {
		t.Error("NewFaultStore(nil): no error")
	}
	if _, err := idemkittest.NewFaultStore((*memory.Store)(nil)); err == nil {
		t.Error("NewFaultStore(typed nil): no error")
	}
	var nilFS *idemkittest.FaultStore
	if err := nilFS.Inject(idemkittest.Fault{Op: idemkittest.OpBegin}); err == nil {
		t.Error("Inject on a nil FaultStore: no error")
	}
	if r := consumer.ExecuteIdempotently(context.Background(), nilFS, "k", nil, ok); r.Outcome != consumer.Error {
		t.Errorf("a nil FaultStore: %v, want ERROR", r.Outcome)
	}
}

// The clock stands still until advanced, and never goes back.
func TestClock(t *testing.T) {
	start := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	c := idemkittest.NewClock(start)
	c.Advance(-time.Hour)
	if !c.Now().Equal(start) {
		t.Fatalf("after a negative advance: %v, want %v", c.Now(), start)
	}
	c.Advance(90 * time.Second)
	if want := start.Add(90 * time.Second); !c.Now().Equal(want) {
		t.Fatalf("after 90s: %v, want %v", c.Now(), want)
	}
}
