package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
)

// countSettles counts a store's Settle calls.
type countSettles struct {
	consumer.Store
	calls atomic.Int32
}

func (c *countSettles) Settle(ctx context.Context, sts []consumer.Settlement) []consumer.SettleReply {
	c.calls.Add(1)
	return c.Store.Settle(ctx, sts)
}

// Settlements gather into full calls: 25 handlers that finish together, with
// WithMaxBatch(10) and a gather delay too long to matter, settle in exactly 3
// calls (10, 10, and the 5 left once no handler runs), not one call each.
func TestPipelineGathersSettlements(t *testing.T) {
	for name, base := range pipelineStores(t) {
		t.Run(name, func(t *testing.T) {
			const n = 25
			s := &countSettles{Store: base}
			ctx := context.Background()
			p, err := consumer.NewPipeline[int](ctx, s, consumer.WithMaxBatch(10), consumer.WithConcurrency(n))
			if err != nil {
				t.Fatal(err)
			}
			consumer.SetPipelineGather(p, time.Millisecond, time.Hour)
			var running atomic.Int32
			all := make(chan struct{})
			res := newResults[int]()
			for i := 0; i < n; i++ {
				if err := p.Submit(ctx, res.item(consumer.Key(fmt.Sprint(t.Name(), "-", i)), func(context.Context) (int, error) {
					if running.Add(1) == n {
						close(all)
					}
					<-all // every handler finishes once all 25 run
					return 1, nil
				})); err != nil {
					t.Fatal(err)
				}
			}
			res.finish(ctx, t, p)
			wantAllSucceeded(t, res, n)
			if got := s.calls.Load(); got != 3 {
				t.Fatalf("%d settle calls for %d messages in batches of 10, want 3", got, n)
			}
		})
	}
}

// A settlement waits no longer than the gather delay for others to join its call:
// message A's handler returns while B's runs, and B's handler waits for A's
// answer, which only the delay's end can send (the call is not full and a handler
// still runs). Two settle calls, one each. Without the bound, B would wait forever.
func TestPipelineGatherDelayIsBounded(t *testing.T) {
	// delay 1ms, then lease/100: the shorter lease is the longest under 100 ms, so
	// that its claims and completions have what room a loaded machine needs
	for _, lease := range []time.Duration{30 * time.Second, 90 * time.Millisecond} {
		for name, base := range pipelineStores(t, consumer.WithLease(lease)) {
			t.Run(fmt.Sprint(name, "/lease=", lease), func(t *testing.T) {
				s := &countSettles{Store: base}
				ctx := context.Background()
				p, err := consumer.NewPipeline[int](ctx, s, consumer.WithConcurrency(2))
				if err != nil {
					t.Fatal(err)
				}
				bStarted, aAnswered := make(chan struct{}), make(chan struct{})
				var aResult consumer.Result[int]
				var wg sync.WaitGroup
				wg.Add(2)
				a := consumer.PipelineItem[int]{Key: consumer.Key(t.Name() + "-a"), Payload: []byte("a"),
					Run: func(context.Context) (int, error) {
						select {
						case <-bStarted:
						case <-time.After(30 * time.Second):
							return 0, errors.New("b's handler never started")
						}
						return 1, nil
					},
					Done: func(r consumer.Result[int]) { aResult = r; close(aAnswered); wg.Done() }}
				var bResult consumer.Result[int]
				b := consumer.PipelineItem[int]{Key: consumer.Key(t.Name() + "-b"), Payload: []byte("b"),
					Run: func(context.Context) (int, error) {
						close(bStarted)
						select {
						case <-aAnswered:
						case <-time.After(30 * time.Second):
							return 0, errors.New("a was not answered while b's handler ran")
						}
						return 2, nil
					},
					Done: func(r consumer.Result[int]) { bResult = r; wg.Done() }}
				for _, it := range []consumer.PipelineItem[int]{a, b} {
					if err := p.Submit(ctx, it); err != nil {
						t.Fatal(err)
					}
				}
				wg.Wait()
				if err := p.Shutdown(ctx); err != nil {
					t.Fatal(err)
				}
				if aResult.Outcome != consumer.Success || bResult.Outcome != consumer.Success {
					t.Fatalf("a: %v %v, b: %v %v; want both SUCCESS", aResult.Outcome, aResult.Err, bResult.Outcome, bResult.Err)
				}
				if got := s.calls.Load(); got != 2 {
					t.Fatalf("%d settle calls, want 2 (one for a, alone, while b ran; one for b)", got)
				}
			})
		}
	}
}

// claimWatch records, at each claim call's answer, how many messages were
// claimed and whose handlers had not returned, and the peak of that.
type claimWatch struct {
	consumer.Store
	mu                      sync.Mutex
	claimed, returned, peak int
}

func (c *claimWatch) Begin(ctx context.Context, claims []consumer.Claim) []consumer.ClaimReply {
	reps := c.Store.Begin(ctx, claims)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range reps {
		if r.Claimed() {
			c.claimed++
		}
	}
	c.peak = max(c.peak, c.claimed-c.returned)
	return reps
}

func (c *claimWatch) handlerReturned() {
	c.mu.Lock()
	c.returned++
	c.mu.Unlock()
}

func (c *claimWatch) outstanding() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.claimed - c.returned
}

// Claims follow the handlers: with 4 handlers and WithMaxBatch(4), 40 messages
// whose handlers wait are claimed 8 at a time at most (4 running, one call's
// read-ahead), although the window would hold all 40.
func TestPipelineClaimsFollowHandlers(t *testing.T) {
	for name, base := range pipelineStores(t) {
		t.Run(name, func(t *testing.T) {
			const n, handlers, batch = 40, 4, 4
			s := &claimWatch{Store: base}
			ctx := context.Background()
			p, err := consumer.NewPipeline[int](ctx, s, consumer.WithConcurrency(handlers), consumer.WithMaxBatch(batch),
				consumer.WithInFlight(64))
			if err != nil {
				t.Fatal(err)
			}
			var running atomic.Int32
			release := make(chan struct{})
			res := newResults[int]()
			for i := 0; i < n; i++ {
				if err := p.Submit(ctx, res.item(consumer.Key(fmt.Sprint(t.Name(), "-", i)), func(context.Context) (int, error) {
					defer s.handlerReturned()
					running.Add(1)
					<-release
					return 1, nil
				})); err != nil {
					t.Fatal(err)
				}
			}
			testenv.Eventually(t, 10*time.Second, "4 handlers running and 8 messages claimed", func() bool {
				return running.Load() == handlers && s.outstanding() == handlers+batch
			})
			close(release)
			res.finish(ctx, t, p)
			wantAllSucceeded(t, res, n)
			if s.peak != handlers+batch || running.Load() != n {
				t.Fatalf("at most %d claimed ahead of returned handlers, %d handlers ran; want %d and %d", s.peak, running.Load(),
					handlers+batch, n)
			}
		})
	}
}

// panickyBegin panics in Begin while on is set.
type panickyBegin struct {
	consumer.Store
	on atomic.Bool
}

func (p *panickyBegin) Begin(ctx context.Context, claims []consumer.Claim) []consumer.ClaimReply {
	if p.on.Load() {
		panic("begin exploded")
	}
	return p.Store.Begin(ctx, claims)
}

// A store whose Begin panics crashes neither engine: the messages of that claim
// call get an Error with the *PanicError (retryable: no handler ran), and the
// next delivery runs normally.
func TestEnginesContainAPanicInBegin(t *testing.T) {
	for name, base := range pipelineStores(t) {
		for _, eng := range engineRunners {
			t.Run(name+"/"+eng.name, func(t *testing.T) {
				s := &panickyBegin{Store: base}
				s.on.Store(true)
				keys := keysFor(t, eng, 2)
				var runs atomic.Int32
				handler := func(context.Context, int) (int, error) { runs.Add(1); return 7, nil }
				for _, r := range eng.run(t, context.Background(), s, keys, handler) {
					var perr *consumer.PanicError
					if r.Outcome != consumer.Error || !errors.As(r.Err, &perr) || r.Action() != consumer.Retry {
						t.Fatalf("%s: %v %v (action %v); want an Error with the *PanicError, retried", r.Key, r.Outcome, r.Err, r.Action())
					}
				}
				if runs.Load() != 0 {
					t.Fatalf("%d handlers ran, want 0", runs.Load())
				}
				s.on.Store(false)
				for _, r := range eng.run(t, context.Background(), s, keys, handler) {
					if r.Outcome != consumer.Success || r.Attempt != 1 {
						t.Fatalf("%s redelivered: %v %v attempt %d; want SUCCESS as attempt 1", r.Key, r.Outcome, r.Err, r.Attempt)
					}
				}
				if runs.Load() != 2 {
					t.Fatalf("%d handlers ran, want 2", runs.Load())
				}
			})
		}
	}
}

// wantAllSucceeded checks that res holds n messages, each answered once with SUCCESS.
func wantAllSucceeded[T any](t *testing.T, res *results[T], n int) {
	t.Helper()
	res.mu.Lock()
	defer res.mu.Unlock()
	if len(res.got) != n {
		t.Fatalf("%d messages answered, want %d", len(res.got), n)
	}
	for k, rs := range res.got {
		if len(rs) != 1 || rs[0].Outcome != consumer.Success {
			t.Fatalf("%s: %d answers, first %v %v; want one SUCCESS", k, len(rs), rs[0].Outcome, rs[0].Err)
		}
	}
}
