package idemotel

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// instrumentation names the tracer and the meter.
const instrumentation = "github.com/idemkit/idemkit/contrib/idemotel"

// Span attribute keys of idemkit's own.
const (
	ScopeKey   = attribute.Key("idemkit.scope")
	KeyKey     = attribute.Key("idemkit.key")
	AttemptKey = attribute.Key("idemkit.attempt")
	FenceKey   = attribute.Key("idemkit.fence")
	SourceKey  = attribute.Key("idemkit.source")
	OutcomeKey = attribute.Key("idemkit.outcome")
	ActionKey  = attribute.Key("idemkit.action")
)

// Tracer is an observer (consumer.WithObserver) that gives every execution a span
// and carries trace context onto the copies adapters produce (consumer.TraceHook).
// Make it with NewTracer.
type Tracer struct {
	cfg    tracerCfg
	tracer trace.Tracer
	name   string               // the spans' name
	static []attribute.KeyValue // attributes every span has
	// startOpts start a handler's span: its kind, built once. Attributes are added
	// once the span is known to record: an unsampled span costs none of them.
	startOpts []trace.SpanStartOption

	mu        sync.Mutex
	pending   map[execution]pendingSpan // handler spans waiting for their outcome
	lastSweep time.Time
}

// Compile-time checks: Tracer implements the hooks it means to.
var (
	_ consumer.TraceHook   = (*Tracer)(nil)
	_ consumer.OutcomeHook = (*Tracer)(nil)
)

// execution names one claim: the outcome of the execution that holds it carries
// the same scope, key and fence.
type execution struct {
	scope string
	key   consumer.Key
	fence int64
}

type pendingSpan struct {
	span    trace.Span
	ended   time.Time // when the handler returned
	kind    string    // the handler's error kind, "" without an error
	applied bool      // the handler found its effect already applied: its outcome is DUPLICATE
}

// pendingAge is how long an ended handler span may wait for its outcome before a
// sweep (run when the pending spans reach WithMaxPending) ends it without one.
const pendingAge = 10 * time.Minute

// NewTracer returns a Tracer configured by opts, or an error that names a bad
// option.
func NewTracer(opts ...TracerOption) (*Tracer, error) {
	c := tracerDefaults()
	for _, o := range opts {
		if o == nil {
			return nil, bad("nil tracer option")
		}
		o.applyTracer(&c)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	t := &Tracer{cfg: c, tracer: c.provider.Tracer(instrumentation), name: "process",
		pending: make(map[execution]pendingSpan)}
	t.static = []attribute.KeyValue{semconv.MessagingOperationTypeProcess, semconv.MessagingOperationName("process")}
	if c.system != "" {
		t.static = append(t.static, semconv.MessagingSystemKey.String(c.system))
	}
	if c.destination != "" {
		t.static = append(t.static, semconv.MessagingDestinationName(c.destination))
		t.name = "process " + c.destination
	}
	t.startOpts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
	return t, nil
}

// StartHandler starts the span of a handler's run, linked to (or, with
// WithProducerAsParent, child of) the producer's span found in the message's
// headers, and returns the handler's context holding it (consumer.TraceHook).
func (t *Tracer) StartHandler(ctx context.Context, e consumer.HandlerEvent) (context.Context, func(consumer.HandlerEvent)) {
	opts := t.startOpts
	parent := ctx
	c, hasCarrier := consumer.CarrierFromContext(ctx)
	if hasCarrier {
		pctx := t.cfg.propagator.Extract(context.Background(), carrier{c})
		if psc := trace.SpanContextFromContext(pctx); psc.IsValid() {
			if t.cfg.asParent {
				parent = trace.ContextWithRemoteSpanContext(parent, psc)
			} else {
				opts = append(opts[:len(opts):len(opts)], trace.WithLinks(trace.Link{SpanContext: psc}))
			}
		}
		if b := baggage.FromContext(pctx); b.Len() > 0 {
			parent = baggage.ContextWithBaggage(parent, b)
		}
	}
	hctx, span := t.tracer.Start(parent, t.name, opts...)
	// The attributes of the execution are built only for a span that records them.
	if span.IsRecording() {
		attrs := t.claimAttributes(append(make([]attribute.KeyValue, 0, len(t.static)+8), t.static...), e.Scope, e.Key, e.Attempt, e.Fence)
		if hasCarrier && t.cfg.fromCarrier != nil {
			attrs = append(attrs, t.cfg.fromCarrier(c)...)
		}
		span.SetAttributes(attrs...)
	}
	// Parked even when not sampled: its outcome must find that a handler ran, and
	// not record a span of its own.
	return hctx, func(end consumer.HandlerEvent) {
		t.park(execution{e.Scope, e.Key, e.Fence}, pendingSpan{span: span, ended: time.Now(), kind: end.Kind,
			applied: errors.Is(end.Err, consumer.ErrAlreadyApplied)})
	}
}

// claimAttributes appends the attributes that name an execution's claim.
func (t *Tracer) claimAttributes(attrs []attribute.KeyValue, scope string, key consumer.Key, attempt int, fence int64) []attribute.KeyValue {
	attrs = append(attrs, ScopeKey.String(scope), AttemptKey.Int(attempt), FenceKey.Int64(fence))
	if t.cfg.keyAttr {
		attrs = append(attrs, KeyKey.String(string(key)))
	}
	return attrs
}

// park keeps an ended handler's span until its execution's outcome is reported.
func (t *Tracer) park(x execution, p pendingSpan) {
	var end []pendingSpan
	t.mu.Lock()
	if old, ok := t.pending[x]; ok { // the same claim twice: not expected; end the first
		end = append(end, old)
	}
	if len(t.pending) >= t.cfg.maxPending {
		now := time.Now()
		if now.Sub(t.lastSweep) > time.Minute {
			t.lastSweep = now
			for k, ps := range t.pending {
				if now.Sub(ps.ended) > pendingAge {
					end = append(end, ps)
					delete(t.pending, k)
				}
			}
		}
	}
	if len(t.pending) < t.cfg.maxPending {
		t.pending[x] = p
	} else {
		end = append(end, p)
	}
	t.mu.Unlock()
	for _, ps := range end {
		endWithoutOutcome(ps)
	}
}

// endWithoutOutcome ends a handler span whose outcome will not be added.
func endWithoutOutcome(p pendingSpan) {
	if !p.span.IsRecording() {
		p.span.End()
		return
	}
	if p.kind != "" {
		kind := telemetry.KindLabel(p.kind)
		p.span.SetAttributes(semconv.ErrorTypeKey.String(kind))
		p.span.SetStatus(codes.Error, kind)
	}
	p.span.End(trace.WithTimestamp(p.ended))
}

// OnOutcome adds an execution's outcome to its handler's span and ends it, or,
// for an execution that ran no handler, records a span of its own
// (consumer.OutcomeHook).
func (t *Tracer) OnOutcome(e consumer.OutcomeEvent) {
	var p pendingSpan
	found := false
	// Only an execution that held a claim can own a parked span; a duplicate, an
	// in-progress answer or a conflict carries the fence of someone else's claim,
	// except the duplicate of a handler that found its effect already applied.
	if e.Fence != 0 && e.Outcome != consumer.InProgress && e.Kind != consumer.KindConflict {
		x := execution{e.Scope, e.Key, e.Fence}
		t.mu.Lock()
		if p, found = t.pending[x]; found && (e.Outcome != consumer.Duplicate || p.applied) {
			delete(t.pending, x)
		} else {
			found = false
		}
		t.mu.Unlock()
	}
	if found && !p.span.IsRecording() {
		p.span.End()
		return
	}
	if found {
		p.span.SetAttributes(outcomeAttributes(make([]attribute.KeyValue, 0, 4), e)...)
		if e.Outcome == consumer.Error {
			p.span.SetStatus(codes.Error, telemetry.KindLabel(e.Kind))
		}
		p.span.End(trace.WithTimestamp(p.ended))
		return
	}
	if !t.cfg.outcomes {
		return
	}
	now := time.Now()
	attrs := t.claimAttributes(make([]attribute.KeyValue, 0, len(t.static)+12), e.Scope, e.Key, e.Attempt, e.Fence)
	attrs = outcomeAttributes(append(attrs, t.static...), e)
	if e.Carrier != nil && t.cfg.fromCarrier != nil {
		attrs = append(attrs, t.cfg.fromCarrier(e.Carrier)...)
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(now.Add(-e.Duration)), trace.WithAttributes(attrs...)}
	parent := context.Background()
	if e.Carrier != nil { // the producer's span, as for a handler's run
		if psc := trace.SpanContextFromContext(t.cfg.propagator.Extract(parent, carrier{e.Carrier})); psc.IsValid() {
			if t.cfg.asParent {
				parent = trace.ContextWithRemoteSpanContext(parent, psc)
			} else {
				opts = append(opts, trace.WithLinks(trace.Link{SpanContext: psc}))
			}
		}
	}
	_, span := t.tracer.Start(parent, t.name, opts...)
	if e.Outcome == consumer.Error {
		span.SetStatus(codes.Error, telemetry.KindLabel(e.Kind))
	}
	span.End(trace.WithTimestamp(now))
}

func outcomeAttributes(attrs []attribute.KeyValue, e consumer.OutcomeEvent) []attribute.KeyValue {
	attrs = append(attrs, SourceKey.String(e.Source), OutcomeKey.String(telemetry.OutcomeLabel(e.Outcome)),
		ActionKey.String(telemetry.ActionLabel(e.Source, e.Action)))
	if e.Kind != "" {
		attrs = append(attrs, semconv.ErrorTypeKey.String(telemetry.KindLabel(e.Kind)))
	}
	return attrs
}

// Inject writes the trace context of ctx into a produced copy's headers through
// set (consumer.TraceHook; adapters call it for the copies they produce). Given
// the handler's context it writes the execution's span; given a context without a
// span, the delivered message's own trace context when its headers have one.
func (t *Tracer) Inject(ctx context.Context, set func(key, value string)) {
	if set == nil {
		return
	}
	if !trace.SpanContextFromContext(ctx).IsValid() {
		if c, ok := consumer.CarrierFromContext(ctx); ok {
			ctx = t.cfg.propagator.Extract(ctx, carrier{c})
		}
	}
	t.cfg.propagator.Inject(ctx, setter(set))
}

// carrier reads a consumer.Carrier as a propagation.TextMapCarrier.
type carrier struct{ c consumer.Carrier }

func (c carrier) Get(key string) string { return c.c.Get(key) }
func (c carrier) Set(string, string)    {}
func (c carrier) Keys() []string        { return c.c.Keys() }

// setter writes through a function as a propagation.TextMapCarrier.
type setter func(key, value string)

func (s setter) Get(string) string     { return "" }
func (s setter) Set(key, value string) { s(key, value) }
func (s setter) Keys() []string        { return nil }
