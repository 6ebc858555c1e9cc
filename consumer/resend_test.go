package consumer_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/store/memory"
)

// refusingSettle is a store that renews leases but refuses every settlement as
// unreachable: the engine's re-sending must end, not hold the message forever.
type refusingSettle struct {
	consumer.Store
	settles atomic.Int64
}

func (s *refusingSettle) Settle(_ context.Context, items []consumer.Settlement) []consumer.SettleReply {
	s.settles.Add(1)
	out := make([]consumer.SettleReply, len(items))
	for i := range out {
		out[i].Err = &consumer.StoreError{Op: "complete", Err: errors.New("refused")}
	}
	return out
}

// A settlement is re-sent while the lease is live, for about one lease of pauses
// and no longer, on both engines; the result is the store's error, the handler
// ran once, and the record is left started for a takeover once its lease ends.
func TestResendingASettlementEnds(t *testing.T) {
	// Re-sends run while the lease is live: a second leaves room for several on a
	// loaded machine, where 300 ms could end before the first.
	const lease = time.Second
	for _, eng := range []string{"execute", "pipeline"} {
		t.Run(eng, func(t *testing.T) {
			s := &refusingSettle{Store: must(memory.NewStore(consumer.WithLease(lease)))}
			var runs atomic.Int64
			handler := func(context.Context) (int, error) { runs.Add(1); return 1, nil }
			done := make(chan consumer.Result[int], 1)
			go func() {
				switch eng {
				case "execute":
					done <- consumer.ExecuteIdempotently(context.Background(), s, "k", nil, handler)
				default:
					p, err := consumer.NewPipeline[int](context.Background(), s)
					if err != nil {
						t.Error(err)
						done <- consumer.Result[int]{}
						return
					}
					defer func() { _ = p.Shutdown(context.Background()) }()
					res := make(chan consumer.Result[int], 1)
					if err := p.Submit(context.Background(), consumer.PipelineItem[int]{Key: "k",
						Run:  handler,
						Done: func(r consumer.Result[int]) { res <- r }}); err != nil {
						t.Error(err)
					}
					done <- <-res
				}
			}()
			var r consumer.Result[int]
			select {
			case r = <-done:
			case <-time.After(time.Minute): // liveness bound, not a speed figure
				t.Fatalf("still re-sending after a minute (%d settle calls)", s.settles.Load())
			}
			if runs.Load() != 1 || !errors.Is(r.Err, consumer.ErrStoreUnavailable) || r.Outcome != consumer.Error {
				t.Fatalf("%d runs, outcome %v, err %v; want 1 run ending in the store's error", runs.Load(), r.Outcome, r.Err)
			}
			if n := s.settles.Load(); n < 2 {
				t.Fatalf("%d settle calls: the settlement was not re-sent while the lease was live", n)
			}
			rec, err := s.Peek(context.Background(), "k")
			if err != nil || rec.State != "started" {
				t.Fatalf("record %+v, %v: want it left started for a takeover", rec, err)
			}
		})
	}
}
