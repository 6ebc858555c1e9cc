package consumertest

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
)

// Stored results and waiting for another owner.

func testResultTooLarge(t *testing.T, f Factory) {
	s := must(t, f, consumer.WithMaxResultSize(16))
	ctx := context.Background()
	k := key("big")
	var runs atomic.Int32
	fn := func(ctx context.Context) (string, error) { runs.Add(1); return strings.Repeat("x", 100), nil }
	r := consumer.ExecuteIdempotently(ctx, s, k, nil, fn)
	expect(t, r, consumer.Success, nil)
	if !r.ResultDropped || len(r.Value) != 100 {
		t.Fatalf("success with a big result: dropped=%v len=%d", r.ResultDropped, len(r.Value))
	}
	dup := consumer.ExecuteIdempotently(ctx, s, k, nil, fn)
	expect(t, dup, consumer.Duplicate, consumer.ErrResultTooLarge)
	var tl *consumer.ResultTooLargeError
	if !dup.ResultDropped || !errors.As(dup.Err, &tl) || tl.Size != 102 || dup.Value != "" {
		t.Fatalf("duplicate: %+v", dup)
	}
	if dup.Action() != consumer.Ack || runs.Load() != 1 {
		t.Fatalf("action %v runs %d", dup.Action(), runs.Load())
	}
}

func testUndecodable(t *testing.T, f Factory) {
	s := must(t, f)
	ctx := context.Background()
	k := key("undecodable")
	expect(t, consumer.ExecuteIdempotently(ctx, s, k, nil, func(ctx context.Context) (string, error) {
		return "not a number", nil
	}), consumer.Success, nil)
	r := consumer.ExecuteIdempotently(ctx, s, k, nil, func(ctx context.Context) (int, error) {
		t.Fatal("handler ran on a completed key")
		return 0, nil
	})
	expect(t, r, consumer.Duplicate, consumer.ErrUndecodableResult)
	if r.Action() != consumer.Ack {
		t.Fatalf("an undecodable duplicate must still be settled, got %v", r.Action())
	}
}

func testWaitInProgress(t *testing.T, f Factory) {
	ctx := context.Background()
	t.Run("GetsTheOtherRunsResult", func(t *testing.T) {
		s := must(t, f, consumer.WithLease(time.Second), consumer.WithWaitInProgress(5*time.Second))
		k := key("wait", "result")
		started, finish := make(chan struct{}), make(chan struct{})
		done := make(chan consumer.Result[string])
		go func() {
			done <- consumer.ExecuteIdempotently(ctx, s, k, nil, func(ctx context.Context) (string, error) {
				close(started)
				<-finish
				return "first", nil
			})
		}()
		<-started
		time.AfterFunc(100*time.Millisecond, func() { close(finish) })
		r := consumer.ExecuteIdempotently(ctx, s, k, nil, func(ctx context.Context) (string, error) {
			t.Error("the waiting delivery ran its handler")
			return "second", nil
		})
		expect(t, r, consumer.Duplicate, nil)
		if r.Value != "first" {
			t.Fatalf("waited for %q, want the first run's result", r.Value)
		}
		expect(t, <-done, consumer.Success, nil)
	})
	t.Run("TakesOverADeadOwner", func(t *testing.T) {
		// The dead owner's lease runs out while the delivery waits; the delivery's
		// own claim, run and completion then fit in the next one.
		s := must(t, f, consumer.WithLease(liveLease), consumer.WithWaitInProgress(5*time.Second))
		k := key("wait", "dead")
		if rep := s.Begin(ctx, []consumer.Claim{{Key: k, Owner: "dead"}})[0]; !rep.Claimed() {
			t.Fatalf("claim = %+v", rep)
		}
		r := consumer.ExecuteIdempotently(ctx, s, k, nil, func(ctx context.Context) (string, error) { return "mine", nil })
		expect(t, r, consumer.Success, nil)
		if r.Fence != 2 || r.Attempt != 1 { // the dead owner never started its handler
			t.Fatalf("takeover after waiting: fence %d attempt %d, want 2 and 1", r.Fence, r.Attempt)
		}
	})
	t.Run("IsBounded", func(t *testing.T) {
		s := must(t, f, consumer.WithLease(10*time.Second), consumer.WithWaitInProgress(200*time.Millisecond))
		k := key("wait", "bounded")
		if rep := s.Begin(ctx, []consumer.Claim{{Key: k, Owner: "slow"}})[0]; !rep.Claimed() {
			t.Fatalf("claim = %+v", rep)
		}
		r := consumer.ExecuteIdempotently(ctx, s, k, nil, func(ctx context.Context) (string, error) {
			t.Error("handler ran while another owner holds the key")
			return "", nil
		})
		expect(t, r, consumer.InProgress, nil)
	})
}
