package idemotel_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/contrib/idemotel"
	"github.com/idemkit/idemkit/internal/observe"
	"github.com/idemkit/idemkit/store/memory"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var w3c = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// producer makes the headers of a message whose producer's span is sc.
func producer(n byte) (trace.SpanContext, propagation.MapCarrier) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0xaa, n}, SpanID: trace.SpanID{0xbb, n},
		TraceFlags: trace.FlagsSampled, Remote: true})
	h := propagation.MapCarrier{}
	w3c.Inject(trace.ContextWithSpanContext(context.Background(), sc), h)
	return sc, h
}

func newTracer(t *testing.T, opts ...idemotel.TracerOption) (*idemotel.Tracer, *tracetest.InMemoryExporter, *sdktrace.TracerProvider) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr, err := idemotel.NewTracer(append([]idemotel.TracerOption{idemotel.WithTracerProvider(tp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return tr, exp, tp
}

func memStore(t *testing.T, opts ...consumer.Option) *memory.Store {
	t.Helper()
	s, err := memory.NewStore(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func attrs(s tracetest.SpanStub) map[attribute.Key]string {
	out := map[attribute.Key]string{}
	for _, kv := range s.Attributes {
		out[kv.Key] = kv.Value.String()
	}
	return out
}

// spansByKey returns the ended spans by their idemkit.key attribute.
func spansByKey(exp *tracetest.InMemoryExporter) map[string][]tracetest.SpanStub {
	out := map[string][]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		k := attrs(s)[idemotel.KeyKey]
		out[k] = append(out[k], s)
	}
	return out
}

// One span per execution, duplicates included, each with its outcome, fence and
// messaging attributes; executions whose handler ran are linked to the producer's
// span found in the message's headers.
func TestOneSpanPerExecution(t *testing.T) {
	tr, exp, _ := newTracer(t, idemotel.WithSystem("kafka"), idemotel.WithDestination("orders"))
	store := memStore(t, consumer.WithScope("billing"), consumer.WithObserver(tr))

	// A batch of five (one fails for good), all from one producer span (one poll's
	// context carries one carrier); then three of them again.
	prodBatch, headers := producer(1)
	ctx := consumer.ContextWithCarrier(context.Background(), headers)
	items := make([]consumer.BatchItem, 5)
	for i := range items {
		items[i] = consumer.BatchItem{Key: consumer.Key(fmt.Sprint("b-", i))}
	}
	h := func(_ context.Context, i int, _ consumer.BatchItem) (int, error) {
		if i == 4 {
			return 0, consumer.Permanent(errors.New("declined"))
		}
		return i, nil
	}
	consumer.ExecuteBatch(ctx, store, items, h)
	consumer.ExecuteBatch(ctx, store, items[:3], h)

	// A pipeline: each message with its own headers; p-0 twice.
	p, err := consumer.NewPipeline[int](context.Background(), store, consumer.WithSource("kafka"))
	if err != nil {
		t.Fatal(err)
	}
	prod, dupProd := map[string]trace.SpanContext{}, map[string]trace.SpanContext{}
	var wg sync.WaitGroup
	for i, k := range []string{"p-0", "p-1", "p-0"} {
		sc, hd := producer(byte(10 + i))
		if _, ok := prod[k]; !ok {
			prod[k] = sc
		} else {
			dupProd[k] = sc // the duplicate links to its own delivery's producer
		}
		wg.Add(1)
		if err := p.Submit(consumer.ContextWithCarrier(context.Background(), hd), consumer.PipelineItem[int]{
			Key:  consumer.Key(k),
			Run:  func(context.Context) (int, error) { return 1, nil },
			Done: func(consumer.Result[int]) { wg.Done() },
		}); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			wg.Wait() // p-0's first execution finishes before its duplicate is submitted
		}
	}
	wg.Wait()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	spans := exp.GetSpans()
	if len(spans) != 5+3+3 {
		t.Fatalf("%d spans, want 11 (one per execution)", len(spans))
	}
	by := spansByKey(exp)
	for k, want := range map[string][]string{
		"b-0": {"success", "duplicate"}, "b-1": {"success", "duplicate"}, "b-2": {"success", "duplicate"},
		"b-3": {"success"}, "b-4": {"error"}, "p-0": {"success", "duplicate"}, "p-1": {"success"},
	} {
		var got []string
		for _, s := range by[k] {
			got = append(got, attrs(s)[idemotel.OutcomeKey])
		}
		sort.Strings(got)
		sort.Strings(want)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("key %s: outcomes %v, want %v", k, got, want)
		}
	}
	for _, s := range spans {
		a := attrs(s)
		k := a[idemotel.KeyKey]
		if s.Name != "process orders" || s.SpanKind != trace.SpanKindConsumer || a["messaging.system"] != "kafka" ||
			a["messaging.destination.name"] != "orders" || a["messaging.operation.type"] != "process" ||
			a[idemotel.ScopeKey] != "billing" || a[idemotel.FenceKey] != "1" || a[idemotel.AttemptKey] != "1" {
			t.Errorf("span %s %q: attributes %v", k, s.Name, a)
		}
		if s.Parent.IsValid() {
			t.Errorf("span %s has parent %v; want a root span (the producer is a link)", k, s.Parent)
		}
		ran := a[idemotel.OutcomeKey] != "duplicate"
		switch {
		case !ran && (len(s.Links) != 1 || !s.Links[0].SpanContext.Equal(linkFor(k, prodBatch, dupProd))):
			t.Errorf("duplicate %s: links %v, want its delivery's producer span", k, s.Links)
		case ran && (len(s.Links) != 1 || !s.Links[0].SpanContext.Equal(linkFor(k, prodBatch, prod))):
			t.Errorf("span %s: links %v, want the producer's span", k, s.Links)
		}
		switch a[idemotel.OutcomeKey] {
		case "error":
			if s.Status.Code != codes.Error || s.Status.Description != "permanent" || a["error.type"] != "permanent" ||
				a[idemotel.ActionKey] != "dead_letter" {
				t.Errorf("failed span %s: status %v, attributes %v", k, s.Status, a)
			}
		default:
			if s.Status.Code != codes.Unset || a["error.type"] != "" || a[idemotel.ActionKey] != "ack" {
				t.Errorf("span %s: status %v, attributes %v", k, s.Status, a)
			}
		}
		wantSource := "execute"
		if k[0] == 'p' {
			wantSource = "kafka"
		}
		if a[idemotel.SourceKey] != wantSource {
			t.Errorf("span %s: source %q, want %q", k, a[idemotel.SourceKey], wantSource)
		}
	}
}

func linkFor(k string, batch trace.SpanContext, prod map[string]trace.SpanContext) trace.SpanContext {
	if sc, ok := prod[k]; ok {
		return sc
	}
	return batch
}

// With WithProducerAsParent the producer's span is the parent; without it, a span
// already in the caller's context (a poll's span, say) is the parent and the
// producer a link.
func TestParentAndLink(t *testing.T) {
	prod, headers := producer(1)
	t.Run("producer as parent", func(t *testing.T) {
		tr, exp, _ := newTracer(t, idemotel.WithProducerAsParent(true))
		store := memStore(t, consumer.WithObserver(tr))
		consumer.ExecuteIdempotently(consumer.ContextWithCarrier(context.Background(), headers), store, "k", nil,
			func(context.Context) (int, error) { return 1, nil })
		s := only(t, exp)
		if s.Parent.SpanID() != prod.SpanID() || s.SpanContext.TraceID() != prod.TraceID() || len(s.Links) != 0 {
			t.Fatalf("parent %v, trace %v, links %v; want the producer's span as parent", s.Parent, s.SpanContext.TraceID(), s.Links)
		}
	})
	t.Run("caller's span as parent", func(t *testing.T) {
		tr, exp, tp := newTracer(t)
		store := memStore(t, consumer.WithObserver(tr))
		ctx, poll := tp.Tracer("test").Start(context.Background(), "poll")
		consumer.ExecuteIdempotently(consumer.ContextWithCarrier(ctx, headers), store, "k", nil,
			func(context.Context) (int, error) { return 1, nil })
		poll.End()
		var s tracetest.SpanStub
		for _, sp := range exp.GetSpans() {
			if sp.Name == "process" {
				s = sp
			}
		}
		if s.Parent.SpanID() != poll.SpanContext().SpanID() || len(s.Links) != 1 || !s.Links[0].SpanContext.Equal(prod) {
			t.Fatalf("parent %v, links %v; want the poll's span as parent and the producer as a link", s.Parent, s.Links)
		}
	})
}

// inject writes the trace context of ctx through set with every consumer.TraceHook
// of store, as the adapters do for the copies they produce.
func inject(ctx context.Context, store consumer.Store, set func(key, value string)) {
	observe.Each(store.Settings().Observers, func(h consumer.TraceHook) { h.Inject(ctx, set) })
}

func only(t *testing.T, exp *tracetest.InMemoryExporter) tracetest.SpanStub {
	t.Helper()
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	return spans[0]
}

// The handler's context holds the execution's span and the producer's baggage;
// a copy the adapter produces (a dead letter) carries the execution's span in W3C
// headers; a copy made without the handler's context carries the message's own.
func TestInjectIntoDeadLetterCopies(t *testing.T) {
	tr, exp, _ := newTracer(t)
	store := memStore(t, consumer.WithObserver(tr))
	prod, headers := producer(1)
	member, _ := baggage.NewMember("tenant", "acme")
	bag, _ := baggage.New(member)
	w3c.Inject(baggage.ContextWithBaggage(context.Background(), bag), headers)
	msgCtx := consumer.ContextWithCarrier(context.Background(), headers)

	dlq := propagation.MapCarrier{}
	var handlerSpan trace.SpanContext
	var tenant string
	r := consumer.ExecuteIdempotently(msgCtx, store, "k", nil, func(hctx context.Context) (int, error) {
		handlerSpan = trace.SpanContextFromContext(hctx)
		tenant = baggage.FromContext(hctx).Member("tenant").Value()
		// What an adapter does when it dead-letters the message.
		inject(hctx, store, dlq.Set)
		return 0, consumer.Permanent(errors.New("poison"))
	})
	if r.Outcome != consumer.Error {
		t.Fatal(r.Outcome, r.Err)
	}
	s := only(t, exp)
	got := trace.SpanContextFromContext(w3c.Extract(context.Background(), dlq))
	if !got.Equal(trace.NewSpanContext(trace.SpanContextConfig{TraceID: s.SpanContext.TraceID(), SpanID: s.SpanContext.SpanID(),
		TraceFlags: s.SpanContext.TraceFlags(), Remote: true})) || handlerSpan.SpanID() != s.SpanContext.SpanID() {
		t.Fatalf("dead-letter copy carries %v (traceparent %q), want the execution's span %v", got, dlq.Get("traceparent"), s.SpanContext)
	}
	if tenant != "acme" || dlq.Get("baggage") != "tenant=acme" {
		t.Fatalf("baggage in the handler %q, in the copy %q; want tenant=acme in both", tenant, dlq.Get("baggage"))
	}

	plain := propagation.MapCarrier{}
	inject(msgCtx, store, plain.Set)
	if got := trace.SpanContextFromContext(w3c.Extract(context.Background(), plain)); !got.Equal(prod) {
		t.Fatalf("a copy made from the message's context carries %v, want the producer's %v", got, prod)
	}
}

// An execution that finds the key in progress gets its own span and leaves the
// running execution's span alone.
func TestInProgressKeepsItsOwnSpan(t *testing.T) {
	tr, exp, _ := newTracer(t)
	store := memStore(t, consumer.WithObserver(tr))
	var inner consumer.Result[int]
	outer := consumer.ExecuteIdempotently(context.Background(), store, "busy", nil, func(ctx context.Context) (int, error) {
		inner = consumer.ExecuteIdempotently(context.Background(), store, "busy", nil, func(context.Context) (int, error) { return 2, nil })
		return 1, nil
	})
	if outer.Outcome != consumer.Success || inner.Outcome != consumer.InProgress {
		t.Fatal(outer.Outcome, inner.Outcome)
	}
	var got []string
	for _, s := range exp.GetSpans() {
		got = append(got, attrs(s)[idemotel.OutcomeKey]+"/"+attrs(s)[idemotel.ActionKey])
	}
	sort.Strings(got)
	if fmt.Sprint(got) != "[in_progress/wait success/ack]" {
		t.Fatalf("spans %v, want one in_progress and one success", got)
	}
}

// Options that leave things out: no key attribute, no spans for executions
// without a handler run; and a sampler that drops everything records nothing.
func TestTracerOptions(t *testing.T) {
	tr, exp, _ := newTracer(t, idemotel.WithKeyAttribute(false), idemotel.WithOutcomeSpans(false))
	store := memStore(t, consumer.WithObserver(tr))
	for i := 0; i < 2; i++ {
		consumer.ExecuteIdempotently(context.Background(), store, "secret-key", nil, func(context.Context) (int, error) { return 1, nil })
	}
	s := only(t, exp)
	if _, ok := attrs(s)[idemotel.KeyKey]; ok || attrs(s)[idemotel.OutcomeKey] != "success" {
		t.Fatalf("attributes %v: want the outcome and no key", attrs(s))
	}

	exp2 := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp2), sdktrace.WithSampler(sdktrace.NeverSample()))
	defer tp.Shutdown(context.Background())
	tr2, err := idemotel.NewTracer(idemotel.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	store2 := memStore(t, consumer.WithObserver(tr2))
	for i := 0; i < 2; i++ {
		consumer.ExecuteIdempotently(context.Background(), store2, "k", nil, func(context.Context) (int, error) { return 1, nil })
	}
	if n := len(exp2.GetSpans()); n != 0 {
		t.Fatalf("%d spans with a sampler that samples nothing", n)
	}
}

func TestBadTracerOptions(t *testing.T) {
	for _, c := range []struct {
		opt  idemotel.TracerOption
		want string
	}{
		{idemotel.WithTracerProvider(nil), "WithTracerProvider(nil)"},
		{idemotel.WithPropagator(nil), "WithPropagator(nil)"},
		{idemotel.WithMaxPending(0), "WithMaxPending(0)"},
		{nil, "nil tracer option"},
	} {
		if _, err := idemotel.NewTracer(c.opt); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewTracer: %v, want an error saying %q", err, c.want)
		}
	}
}
