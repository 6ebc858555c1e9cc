package consumer_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/memory"
)

// A handler cut short by its caller's cancellation (an adapter's shutdown or
// revocation cancels the context it submitted with) is not an attempt: with one
// attempt allowed, the next delivery still runs it.
func TestInterruptedHandlersAreNotCharged(t *testing.T) {
	for name, s := range pipelineStores(t, consumer.WithMaxAttempts(1)) {
		t.Run(name+"/pipeline", func(t *testing.T) {
			ctx := context.Background()
			p, err := consumer.NewPipeline[int](ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = p.Shutdown(ctx) }()
			sctx, cancel := context.WithCancel(ctx)
			started := make(chan struct{})
			res := newResults[int]()
			k := consumer.Key("interrupted-pipeline")
			if err := p.Submit(sctx, res.item(k, func(hctx context.Context) (int, error) {
				close(started)
				<-hctx.Done()
				return 0, hctx.Err()
			})); err != nil {
				t.Fatal(err)
			}
			<-started
			cancel() // the adapter revokes the partition
			res.wg.Wait()
			r := res.got[k][0]
			if !errors.Is(r.Err, consumer.ErrInterrupted) || !r.Retryable() || !consumer.NotAnAttempt(r.Err) ||
				r.Action() == consumer.DeadLetter {
				t.Fatalf("interrupted handler: %+v, want ErrInterrupted, retryable, not an attempt", r)
			}
			wantRunsOnceMore(t, s, k)
		})
		t.Run(name+"/batch", func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			k := consumer.Key("interrupted-batch")
			r := consumer.ExecuteIdempotently(ctx, s, k, []byte(k), func(hctx context.Context) (int, error) {
				cancel() // the caller gives up while the handler runs
				<-hctx.Done()
				return 0, hctx.Err()
			})
			if !errors.Is(r.Err, consumer.ErrInterrupted) || !consumer.NotAnAttempt(r.Err) {
				t.Fatalf("interrupted handler: %+v, want ErrInterrupted", r)
			}
			wantRunsOnceMore(t, s, k)
		})
	}
}

// wantRunsOnceMore runs k's handler again: it must run, as attempt 1.
func wantRunsOnceMore(t *testing.T, s consumer.Store, k consumer.Key) {
	t.Helper()
	var runs atomic.Int32
	r := consumer.ExecuteIdempotently(context.Background(), s, k, []byte(k), func(context.Context) (int, error) {
		runs.Add(1)
		return 1, nil
	})
	if r.Outcome != consumer.Success || r.Attempt != 1 || runs.Load() != 1 {
		t.Fatalf("the next delivery: %v %v attempt %d, %d runs; want SUCCESS as attempt 1, one run", r.Outcome, r.Err, r.Attempt, runs.Load())
	}
}

// Shutdown may be called twice, and concurrently: every call returns once the
// pipeline has stopped.
func TestPipelineShutdownTwice(t *testing.T) {
	s := must(memory.NewStore())
	ctx := context.Background()
	p, err := consumer.NewPipeline[int](ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	res := newResults[int]()
	if err := p.Submit(ctx, res.item("k", func(context.Context) (int, error) { return 1, nil })); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = p.Shutdown(ctx) }()
	}
	wg.Wait()
	if err := p.Shutdown(ctx); err != nil || errors.Join(errs...) != nil {
		t.Fatalf("Shutdown calls: %v, %v", errs, err)
	}
	if res.done.Load() != 1 {
		t.Fatalf("%d answers, want 1", res.done.Load())
	}
}

// When Shutdown gives up on a handler that ignores its context, the pipeline
// still stops once the handler returns: its claim is released uncounted and a
// later Shutdown reports the pipeline stopped.
func TestPipelineGivesUpThenStops(t *testing.T) {
	s := must(memory.NewStore(consumer.WithCallTimeout(50*time.Millisecond), consumer.WithMaxAttempts(1)))
	ctx := context.Background()
	p, err := consumer.NewPipeline[int](ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	res := newResults[int]()
	if err := p.Submit(ctx, res.item("stubborn", func(context.Context) (int, error) {
		close(started)
		<-release // ignores its context
		return 0, errors.New("gave up late")
	})); err != nil {
		t.Fatal(err)
	}
	<-started
	sctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := p.Shutdown(sctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown with a handler still running: %v, want the deadline", err)
	}
	close(release)
	if err := p.Shutdown(ctx); err != nil { // returns once every goroutine has ended
		t.Fatalf("Shutdown after the handler returned: %v", err)
	}
	r := res.got["stubborn"][0]
	if !errors.Is(r.Err, consumer.ErrInterrupted) || !errors.Is(r.Err, consumer.ErrPipelineStopped) {
		t.Fatalf("stubborn handler: %+v, want interrupted by the shutdown", r)
	}
	wantRunsOnceMore(t, s, "stubborn")
}

// When Shutdown gives up on a pipeline whose caller also cancelled (an adapter
// cancels both), every message it cut short names the pipeline's stop, whether
// its handler started or not: RabbitMQ leaves such a message to the broker
// instead of sending it through its retry queue.
func TestPipelineStopIsNamedOverTheCallersCancellation(t *testing.T) {
	claims := &tally{}
	s := must(memory.NewStore(consumer.WithCallTimeout(50*time.Millisecond), consumer.WithObserver(claims)))
	ctx := context.Background()
	p, err := consumer.NewPipeline[int](ctx, s, consumer.WithConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	started, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	res := newResults[int]()
	for _, k := range []consumer.Key{"running", "waiting"} {
		if err := p.Submit(sctx, res.item(k, func(context.Context) (int, error) {
			if runs.Add(1) == 1 {
				close(started)
				<-release // ignores its context
			}
			return 0, errors.New("gave up late")
		})); err != nil {
			t.Fatal(err)
		}
	}
	<-started
	testenv.Eventually(t, 10*time.Second, "both messages claimed", func() bool {
		claims.mu.Lock()
		defer claims.mu.Unlock()
		return claims.claimed == 2
	})
	cancel() // the adapter cancels what it submitted...
	gone, stop := context.WithCancel(ctx)
	stop()
	if err := p.Shutdown(gone); err == nil { // ...and gives up on the pipeline
		t.Fatal("Shutdown with a handler still running returned nil")
	}
	close(release)
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	run, wait := res.got["running"], res.got["waiting"]
	switch {
	case runs.Load() != 1:
		t.Fatalf("%d handlers ran, want 1", runs.Load())
	case len(run) != 1 || !errors.Is(run[0].Err, consumer.ErrInterrupted) || !errors.Is(run[0].Err, consumer.ErrPipelineStopped):
		t.Fatalf("running: %+v, want interrupted by the pipeline's stop", run)
	case len(wait) != 1 || !errors.Is(wait[0].Err, consumer.ErrNotRun) || !errors.Is(wait[0].Err, consumer.ErrPipelineStopped) ||
		wait[0].Fence != 1:
		t.Fatalf("waiting: %+v, want not run for the pipeline's stop, on its claim (fence 1)", wait)
	}
}
