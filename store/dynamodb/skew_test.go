package dynamodb

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
)

// twoWorkers are two stores on the same records (one prefix), B's clock set
// off from A's by offset.
func twoWorkers(t *testing.T, cfg Config, offset time.Duration, opts ...consumer.Option) (a, b *Store) {
	t.Helper()
	opts = append([]consumer.Option{consumer.WithPrefix(prefix(t))}, opts...)
	c := client(t)
	cfg.Table = testTable
	a, err := New(c, cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	b, err = New(c, cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	b.offset.Store(offset.Milliseconds())
	return a, b
}

// TestTakeoverWaitsForSkew: with the default skew allowance a record is taken
// over once its lease and the allowance have run out on the taker's clock, not
// before; IN_PROGRESS says how long is left until then.
func TestTakeoverWaitsForSkew(t *testing.T) {
	lease := 300 * time.Millisecond
	a, b := twoWorkers(t, Config{}, 0, consumer.WithLease(lease))
	if b.Config().ClockSkew != DefaultClockSkew {
		t.Fatalf("skew %v, want the default %v", b.Config().ClockSkew, DefaultClockSkew)
	}
	ctx := context.Background()
	if rep := a.Begin(ctx, []consumer.Claim{{Key: "k", Owner: "a"}})[0]; !rep.Claimed() {
		t.Fatalf("A's claim: %+v", rep)
	}
	time.Sleep(lease + 50*time.Millisecond) // A's lease is over; the allowance is not
	rep := b.Begin(ctx, []consumer.Claim{{Key: "k", Owner: "b"}})[0]
	if rep.Status != consumer.StatusInProgress || rep.Lease <= 0 || rep.Lease > DefaultClockSkew {
		t.Fatalf("B within the allowance: %+v, want IN_PROGRESS with at most %v left", rep, DefaultClockSkew)
	}
	time.Sleep(rep.Lease + 20*time.Millisecond)
	rep = b.Begin(ctx, []consumer.Claim{{Key: "k", Owner: "b"}})[0]
	if rep.Status != consumer.StatusTakenOver || rep.Fence != 2 {
		t.Fatalf("B after lease and allowance: %+v, want TAKEN_OVER at fence 2", rep)
	}
}

// TestClockSkew: a worker whose clock runs ahead of the claimer's by less than
// the allowance cannot take a live claim over. One ahead by more takes it over
// while the first owner still runs (the bound the allowance states): the fence
// then refuses the first owner's completion, and an effect written with Apply
// happens once.
func TestClockSkew(t *testing.T) {
	lease, skew := 2*time.Second, 500*time.Millisecond
	ctx := context.Background()

	t.Run("WithinTheAllowance", func(t *testing.T) {
		a, b := twoWorkers(t, Config{ClockSkew: skew}, skew-100*time.Millisecond, consumer.WithLease(lease))
		if rep := a.Begin(ctx, []consumer.Claim{{Key: "k", Owner: "a"}})[0]; !rep.Claimed() {
			t.Fatalf("A's claim: %+v", rep)
		}
		// B's clock reads A's lease as over in lease-400ms; with the allowance
		// it waits 100ms more than A's lease.
		time.Sleep(lease - 200*time.Millisecond)
		if rep := b.Begin(ctx, []consumer.Claim{{Key: "k", Owner: "b"}})[0]; rep.Status != consumer.StatusInProgress {
			t.Fatalf("B, %v ahead, before A's lease is over: %v, want IN_PROGRESS", skew-100*time.Millisecond, rep.Status)
		}
	})

	t.Run("BeyondTheAllowance", func(t *testing.T) {
		a, b := twoWorkers(t, Config{ClockSkew: skew}, lease+skew+time.Second, consumer.WithLease(lease))
		c := client(t)
		item := "acct:" + prefix(t)
		aIn, aGo := make(chan struct{}), make(chan struct{})
		aDone := make(chan consumer.Result[int])
		var runs atomic.Int32
		go func() {
			aDone <- consumer.ExecuteIdempotently(ctx, a, "pay", nil, func(ctx context.Context) (int, error) {
				runs.Add(1)
				close(aIn)
				<-aGo // B runs meanwhile
				return credit(ctx, c, item, true)
			})
		}()
		<-aIn
		// B's clock is past A's lease and the allowance already: it takes over
		// a claim whose owner is alive.
		rb := consumer.ExecuteIdempotently(ctx, b, "pay", nil, func(ctx context.Context) (int, error) {
			runs.Add(1)
			return credit(ctx, c, item, true)
		})
		if rb.Outcome != consumer.Success || rb.Fence != 2 || rb.Value != 1 {
			t.Fatalf("B: %v %v fence %d value %d, want SUCCESS at fence 2", rb.Outcome, rb.Err, rb.Fence, rb.Value)
		}
		close(aGo)
		ra := <-aDone
		// A's write finds the key applied; its completion finds B's fence.
		if ra.Outcome != consumer.Error || !errors.Is(ra.Err, consumer.ErrLeaseLost) || ra.Fence != 1 {
			t.Fatalf("A: %v %v fence %d, want lease lost at fence 1", ra.Outcome, ra.Err, ra.Fence)
		}
		if got := balance(t, c, item); got != 1 || runs.Load() != 2 {
			t.Fatalf("balance %d after %d runs, want 1 after 2", got, runs.Load())
		}
		if rec, _ := a.Peek(ctx, "pay"); rec.State != "completed" || rec.Fence != 2 || string(rec.Result) != "1" {
			t.Fatalf("record %+v, want B's completion", rec)
		}
	})
}
