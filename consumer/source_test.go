package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/observe"
	"github.com/idemkit/idemkit/store/memory"
)

// events records the outcome and handler events it is told of.
type events struct {
	mu       sync.Mutex
	outcomes []consumer.OutcomeEvent
	ends     []consumer.HandlerEvent
	claims   []consumer.ClaimEvent
}

func (e *events) OnOutcome(o consumer.OutcomeEvent) {
	e.mu.Lock()
	e.outcomes = append(e.outcomes, o)
	e.mu.Unlock()
}
func (e *events) OnHandlerStart(consumer.HandlerEvent) {}
func (e *events) OnHandlerEnd(h consumer.HandlerEvent) {
	e.mu.Lock()
	e.ends = append(e.ends, h)
	e.mu.Unlock()
}
func (e *events) OnClaim(c consumer.ClaimEvent) {
	e.mu.Lock()
	e.claims = append(e.claims, c)
	e.mu.Unlock()
}

// A context that names its source (as the HTTP middleware's does) names the
// source of the executions made with it, and not of those their handlers start.
func TestContextSource(t *testing.T) {
	obs := &events{}
	s := must(memory.NewStore(consumer.WithScope("api"), consumer.WithObserver(obs)))
	ctx := observe.WithSource(context.Background(), consumer.SourceHTTP)
	r := consumer.ExecuteIdempotently(ctx, s, "outer", nil, func(hctx context.Context) (int, error) {
		consumer.ExecuteIdempotently(hctx, s, "inner", nil, func(context.Context) (int, error) { return 2, nil })
		return 1, nil
	})
	consumer.ExecuteBatch(ctx, s, []consumer.BatchItem{{Key: "b"}}, func(context.Context, int, consumer.BatchItem) (int, error) {
		return 3, nil
	})
	if r.Outcome != consumer.Success {
		t.Fatalf("%v %v", r.Outcome, r.Err)
	}
	got := map[string]string{}
	for _, o := range obs.outcomes {
		got["outcome "+string(o.Key)] = o.Source
	}
	for _, h := range obs.ends {
		got["handler "+string(h.Key)] = h.Source
	}
	want := map[string]string{"outcome outer": "http", "handler outer": "http", "outcome b": "http", "handler b": "http",
		"outcome inner": "execute", "handler inner": "execute"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("sources %v, want %v", got, want)
	}
}

// A handler that finds its effect already applied (ErrAlreadyApplied, as
// store/postgres's InTx returns after a crash) is no failure: its end carries no
// error kind, and the claim that took the crashed owner's record over is counted.
func TestAlreadyAppliedAfterATakeover(t *testing.T) {
	obs := &events{}
	s := must(memory.NewStore(consumer.WithScope("ledger"), consumer.WithLease(50*time.Millisecond),
		consumer.WithWaitInProgress(time.Minute), consumer.WithObserver(obs)))
	ctx := context.Background()
	// A worker claims the key and dies before it settles.
	if rep := s.Begin(ctx, []consumer.Claim{{Key: "transfer-7", Owner: "crashed-worker"}}); !rep[0].Claimed() {
		t.Fatalf("claim: %v %v", rep[0].Status, rep[0].Err)
	}
	runs := 0
	r := consumer.ExecuteIdempotently(ctx, s, "transfer-7", nil, func(context.Context) (int, error) {
		runs++
		return 42, consumer.AlreadyApplied()
	})
	if r.Outcome != consumer.Duplicate || r.Value != 42 || runs != 1 {
		t.Fatalf("%v %v value %d, %d runs; want DUPLICATE 42 after 1 run", r.Outcome, r.Err, r.Value, runs)
	}
	taken := 0
	for _, c := range obs.claims {
		taken += c.TakenOver
	}
	if len(obs.ends) != 1 || obs.ends[0].Kind != "" || !errors.Is(obs.ends[0].Err, consumer.ErrAlreadyApplied) {
		t.Fatalf("handler ends %+v, want one with Err ErrAlreadyApplied and no kind", obs.ends)
	}
	if taken != 1 || len(obs.outcomes) != 1 || obs.outcomes[0].Kind != "" {
		t.Fatalf("%d takeovers, outcomes %+v; want 1 takeover and one outcome without a kind", taken, obs.outcomes)
	}
}
