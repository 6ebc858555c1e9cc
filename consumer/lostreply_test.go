package consumer_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
)

// loseFirstClaimReply applies the first Begin call and loses its reply.
type loseFirstClaimReply struct {
	consumer.Store
	calls atomic.Int32
}

func (l *loseFirstClaimReply) Begin(ctx context.Context, claims []consumer.Claim) []consumer.ClaimReply {
	reps := l.Store.Begin(ctx, claims)
	if l.calls.Add(1) == 1 {
		for i := range reps {
			reps[i] = consumer.ClaimReply{Err: &consumer.StoreError{Op: "begin", Err: fmt.Errorf("reply lost: %w", context.DeadlineExceeded)}}
		}
	}
	return reps
}

// A claim whose reply is lost is sent again with the same owner token and finds
// itself: the handler runs at once, on that claim (fence 1), with no attempt lost.
func TestLostClaimReplyFindsItsOwnClaim(t *testing.T) {
	for name, base := range pipelineStores(t, consumer.WithMaxAttempts(1)) {
		t.Run(name, func(t *testing.T) {
			s := &loseFirstClaimReply{Store: base}
			var runs atomic.Int32
			r := consumer.ExecuteIdempotently(context.Background(), s, "lost-reply", nil, func(context.Context) (int, error) {
				runs.Add(1)
				return 1, nil
			})
			if r.Outcome != consumer.Success || r.Fence != 1 || r.Attempt != 1 || runs.Load() != 1 {
				t.Fatalf("%v %v fence %d attempt %d, %d runs; want SUCCESS on the first claim, one run", r.Outcome, r.Err, r.Fence, r.Attempt, runs.Load())
			}
			// the lost one, its resend, and the mark a claim sent again gets before its
			// handler starts (its first send may have taken a record over)
			if s.calls.Load() != 3 {
				t.Fatalf("%d claim calls, want 3", s.calls.Load())
			}
		})
	}
}

// A takeover whose reply is lost is answered as the caller's own claim when it
// is sent again; its handler still runs counted, as a takeover's does.
func TestLostTakeoverReplyRunsCounted(t *testing.T) {
	// The resent claim must be answered, and the handler's read land, within the
	// lease less its margin: a second, not 100 ms, on a loaded machine.
	lease := time.Second
	for name, base := range pipelineStores(t, consumer.WithLease(lease)) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			if rep := base.Begin(ctx, []consumer.Claim{{Key: "lost-takeover", Owner: "dead"}})[0]; !rep.Claimed() {
				t.Fatalf("claim = %+v", rep)
			}
			time.Sleep(lease + 30*time.Millisecond) // its owner died before its handler started
			s := &loseFirstClaimReply{Store: base}
			var counted bool
			r := consumer.ExecuteIdempotently(ctx, s, "lost-takeover", nil, func(ctx context.Context) (int, error) {
				rec, err := base.Peek(ctx, "lost-takeover")
				counted = err == nil && rec.Counted
				return 1, nil
			})
			if r.Outcome != consumer.Success || r.Fence != 2 || !counted {
				t.Fatalf("%v %v fence %d, counted while it ran %v; want SUCCESS at fence 2, counted", r.Outcome, r.Err, r.Fence, counted)
			}
		})
	}
}
