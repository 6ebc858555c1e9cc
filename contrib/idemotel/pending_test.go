package idemotel

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/observertest"
	"github.com/idemkit/idemkit/store/memory"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Every handler span waits for its outcome and no longer: after the executions,
// sampled or not, nothing is left pending.
func TestNothingLeftPending(t *testing.T) {
	for _, sampler := range []sdktrace.Sampler{sdktrace.AlwaysSample(), sdktrace.NeverSample()} {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sampler))
		tr, err := NewTracer(WithTracerProvider(tp))
		if err != nil {
			t.Fatal(err)
		}
		store, err := memory.NewStore(consumer.WithObserver(tr))
		if err != nil {
			t.Fatal(err)
		}
		items := make([]consumer.BatchItem, 20)
		for i := range items {
			items[i] = consumer.BatchItem{Key: consumer.Key(fmt.Sprint("k", i%15))} // five repeat in the batch
		}
		consumer.ExecuteBatch(context.Background(), store, items, func(_ context.Context, i int, _ consumer.BatchItem) (int, error) {
			if i%4 == 0 {
				return 0, errors.New("retry me")
			}
			return i, nil
		}, consumer.WithConcurrency(4))
		tr.mu.Lock()
		left := len(tr.pending)
		tr.mu.Unlock()
		want := 20
		if sampler == sdktrace.NeverSample() {
			want = 0
		}
		if left != 0 || len(exp.GetSpans()) != want {
			t.Fatalf("%s: %d spans pending, %d exported; want 0 and %d", sampler.Description(), left, len(exp.GetSpans()), want)
		}
		_ = tp.Shutdown(context.Background())
	}
}

// Past WithMaxPending, a handler span is ended at once, without its outcome.
func TestMaxPending(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	tr, err := NewTracer(WithTracerProvider(tp), WithMaxPending(1))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		_, end := tr.StartHandler(context.Background(), consumer.HandlerEvent{Key: consumer.Key(fmt.Sprint("k", i)), Fence: 1})
		end(consumer.HandlerEvent{Kind: consumer.KindHandler})
	}
	if n := len(exp.GetSpans()); n != 2 {
		t.Fatalf("%d spans ended at once, want 2 (one waits)", n)
	}
	if s := exp.GetSpans()[0]; s.Status.Description != consumer.KindHandler {
		t.Fatalf("status %v, want the handler's error kind", s.Status)
	}
}

// A handler that finds its effect already applied after a takeover (its
// execution ends DUPLICATE) gets its outcome on its own span, which is ended at
// once, without an error; no second span is made for the duplicate.
func TestAlreadyAppliedEndsItsHandlerSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	tr, err := NewTracer(WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	observertest.Takeover(t, tr)
	tr.mu.Lock()
	left := len(tr.pending)
	tr.mu.Unlock()
	spans := exp.GetSpans()
	if left != 0 || len(spans) != 1 {
		t.Fatalf("%d spans pending, %d exported; want 0 and 1", left, len(spans))
	}
	a := map[string]string{}
	for _, kv := range spans[0].Attributes {
		a[string(kv.Key)] = kv.Value.String()
	}
	if a[string(OutcomeKey)] != "duplicate" || a["error.type"] != "" || spans[0].Status.Code != codes.Unset || a[string(FenceKey)] != "2" {
		t.Fatalf("span: status %v, attributes %v; want the taking-over handler's (fence 2), duplicate, no error", spans[0].Status, a)
	}
}
