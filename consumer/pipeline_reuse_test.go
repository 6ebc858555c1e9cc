package consumer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/store/memory"
)

// heldRenewals is a store whose renewals wait for the test: each Extend call
// shows its items on calls, then answers every item with what answers gives it.
type heldRenewals struct {
	consumer.Store
	calls   chan []consumer.Owned
	answers chan error
}

func (h *heldRenewals) Extend(_ context.Context, items []consumer.Owned) []error {
	h.calls <- items
	err := <-h.answers
	errs := make([]error, len(items))
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// A renewal sent for a message's claim whose answer comes back after that message
// settled touches nothing else, even though the pipeline reuses the settled
// message's memory (its lease included) for the next message: that message's
// handler keeps a live context, and no lease is reported lost, when the late
// answer says the first claim's lease is gone. Both messages succeed, once each.
func TestPipelineLateRenewalLeavesTheNextMessageAlone(t *testing.T) {
	obs := &tally{}
	mem, err := memory.NewStore(consumer.WithLease(time.Minute), consumer.WithObserver(obs)) // no renewal but the test's
	if err != nil {
		t.Fatal(err)
	}
	store := &heldRenewals{Store: mem, calls: make(chan []consumer.Owned), answers: make(chan error)}
	ctx := context.Background()
	// A window of one: the second message is submitted once the first's slot is
	// free, when the first is answered and its memory kept for reuse.
	p, err := consumer.NewPipeline[string](ctx, store, consumer.WithInFlight(1), consumer.WithConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	key := consumer.Key(t.Name())
	results := make(chan consumer.Result[string], 2)
	done := func(r consumer.Result[string]) { results <- r }

	firstRuns, firstGo := make(chan struct{}), make(chan struct{})
	err = p.Submit(ctx, consumer.PipelineItem[string]{Key: key + "-first", Done: done,
		Run: func(context.Context) (string, error) { close(firstRuns); <-firstGo; return "first", nil }})
	if err != nil {
		t.Fatal(err)
	}
	<-firstRuns
	renewed := make(chan struct{})
	go func() { defer close(renewed); consumer.RenewPipelineLeases(ctx, p) }()
	if items := <-store.calls; len(items) != 1 || items[0].Key != key+"-first" {
		t.Fatalf("the renewal carries %+v, want the first message's claim", items)
	}
	close(firstGo)
	if r := <-results; r.Outcome != consumer.Success || r.Value != "first" {
		t.Fatalf("first message: %v %q %v", r.Outcome, r.Value, r.Err)
	}

	secondRuns, secondGo := make(chan struct{}), make(chan struct{})
	var secondErr error // the second handler's context's error once the late answer was applied
	err = p.Submit(ctx, consumer.PipelineItem[string]{Key: key + "-second", Done: done,
		Run: func(ctx context.Context) (string, error) {
			close(secondRuns)
			<-secondGo
			secondErr = context.Cause(ctx)
			return "second", nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	<-secondRuns
	store.answers <- consumer.ErrLeaseLost // the first claim is settled: the store has no lease for it
	<-renewed
	close(secondGo)
	if r := <-results; r.Outcome != consumer.Success || r.Value != "second" {
		t.Fatalf("second message: %v %q %v", r.Outcome, r.Value, r.Err)
	}
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	var lost *consumer.LeaseLostError
	if secondErr != nil {
		t.Errorf("the second handler's context ended (%v, lease lost: %v); want it live", secondErr, errors.As(secondErr, &lost))
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.lost != 0 || obs.starts != 2 {
		t.Errorf("%d leases reported lost, %d handlers started; want 0 and 2", obs.lost, obs.starts)
	}
}
