package consumer_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

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
			if s.calls.Load() != 2 {
				t.Fatalf("%d claim calls, want 2 (the lost one and its resend)", s.calls.Load())
			}
		})
	}
}
