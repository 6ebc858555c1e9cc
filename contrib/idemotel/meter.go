package idemotel

import (
	"context"
	"github.com/idemkit/idemkit/internal/telemetry"
	"sync/atomic"

	"github.com/idemkit/idemkit/consumer"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Meter is an observer (consumer.WithObserver) that records what it is told on
// OpenTelemetry instruments. One Meter may observe any number of stores. Make it
// with NewMeter.
//
// Counts (outcomes, claim answers, messages, running handlers, adapter events) are
// kept in atomic counters of the Meter's own, one per attribute set, and reported
// by observable instruments when the provider collects; durations go to
// histograms as they are measured. An event thus costs an atomic add, or one
// histogram measurement, instead of the SDK's per-measurement attribute handling.
type Meter struct {
	cfg meterCfg

	outcomes, storeMsgs, answers, takeovers, leasesLost, retries, deadLetters,
	bodyless, commits, acks, acked metric.Int64ObservableCounter
	running      metric.Int64ObservableUpDownCounter
	handler      metric.Float64Histogram
	storeLatency metric.Float64Histogram
	lag          *lagTable
	records      *records

	sOutcome  *telemetry.Series[outcomeKey, *count]
	sRunning  *telemetry.Series[string, *count]
	sLost     *telemetry.Series[string, *count]
	sAnswers  *telemetry.Series[string, [5]*count]
	sTaken    *telemetry.Series[string, *count]
	sHandler  *telemetry.Series[scopeKind, []metric.RecordOption]
	sStore    *telemetry.Series[scopeOp, storeSeries]
	sRetry    *telemetry.Series[sourceScopeKind, *count]
	sDead     *telemetry.Series[sourceScopeKind, *count]
	sBodyless *telemetry.Series[sourceScopeKind, *count]
	sCommit   *telemetry.Series[sourceDest, *count]
	sAck      *telemetry.Series[sourceDest, [2]*count]
}

// Compile-time checks: Meter implements every hook it means to.
var (
	_ consumer.ClaimHook      = (*Meter)(nil)
	_ consumer.HandlerHook    = (*Meter)(nil)
	_ consumer.LeaseHook      = (*Meter)(nil)
	_ consumer.SettleHook     = (*Meter)(nil)
	_ consumer.OutcomeHook    = (*Meter)(nil)
	_ consumer.RetryHook      = (*Meter)(nil)
	_ consumer.DeadLetterHook = (*Meter)(nil)
	_ consumer.CommitHook     = (*Meter)(nil)
	_ consumer.AckHook        = (*Meter)(nil)
)

// count is one series of an observable counter: its value and its attributes.
type count struct {
	n     atomic.Int64
	attrs metric.ObserveOption
}

func newCount(kvs ...attribute.KeyValue) *count {
	return &count{attrs: metric.WithAttributeSet(attribute.NewSet(kvs...))}
}

// recordOpts are the measurement options of one histogram series, built once.
func recordOpts(kvs ...attribute.KeyValue) []metric.RecordOption {
	return []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(kvs...))}
}

type (
	outcomeKey struct {
		scope, source string
		outcome       consumer.Outcome
		action        consumer.Action
		kind          string
	}
	scopeKind       struct{ scope, kind string }
	scopeOp         struct{ scope, op string }
	sourceScopeKind struct{ source, scope, kind string }
	sourceDest      struct{ source, dest string } // dest: the topic or the queue
	storeSeries     struct {
		latency  []metric.RecordOption
		messages *count
	}
)

var answerNames = [5]string{"claimed", "duplicate", "in_progress", "conflict", "error"}

// NewMeter returns a Meter configured by opts, or an error that names a bad
// option or says why an instrument could not be made.
func NewMeter(options ...MeterOption) (*Meter, error) {
	c := meterDefaults()
	for _, o := range options {
		if o == nil {
			return nil, bad("nil meter option")
		}
		o.applyMeter(&c)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	m := &Meter{cfg: c}
	mt := c.provider.Meter(instrumentation)
	var errs []error
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		i, err := mt.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return i
	}
	histogram := func(name, desc string, bounds []float64) metric.Float64Histogram {
		i, err := mt.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(bounds...))
		errs = append(errs, err)
		return i
	}
	m.outcomes = counter("idemkit.outcomes", "{message}", "Messages by the outcome of their execution.")
	m.handler = histogram("idemkit.handler.duration", "How long handlers ran.", c.handlerBounds)
	var err error
	m.running, err = mt.Int64ObservableUpDownCounter("idemkit.handlers.running", metric.WithUnit("{handler}"),
		metric.WithDescription("Handlers running now."))
	errs = append(errs, err)
	m.storeLatency = histogram("idemkit.store.latency", "How long store calls took (op: claim, settle, renew).", c.storeBounds)
	m.storeMsgs = counter("idemkit.store.messages", "{message}", "Messages the store calls carried.")
	m.answers = counter("idemkit.claim.answers", "{message}", "What claims found: claimed, duplicate, in_progress (another owner at work), conflict, error.")
	m.takeovers = counter("idemkit.claim.takeovers", "{message}", "Claims that took over a record whose owner crashed or stalled (its lease ran out, or its lock holder was gone); counted as claimed too.")
	m.leasesLost = counter("idemkit.leases.lost", "{lease}", "Attempts stopped because their lease was lost.")
	m.retries = counter("idemkit.retries", "{message}", "Retries adapters scheduled.")
	m.deadLetters = counter("idemkit.dead_letters", "{message}", "Dead-letter copies the broker confirmed.")
	m.bodyless = counter("idemkit.dead_letters.bodyless", "{message}", "Dead-letter copies sent without their body (the broker refused the full copy).")
	m.commits = counter("idemkit.commits", "{commit}", "Offsets committed.")
	m.acks = counter("idemkit.acks", "{ack}", "Acknowledgements sent.")
	m.acked = counter("idemkit.acked_messages", "{message}", "Deliveries acknowledgements settled.")
	for _, err := range errs {
		if err != nil {
			return nil, bad("an instrument could not be made: %v", err)
		}
	}
	if _, err := mt.RegisterCallback(m.observe, m.outcomes, m.running, m.storeMsgs, m.answers, m.takeovers, m.leasesLost, m.retries,
		m.deadLetters, m.bodyless, m.commits, m.acks, m.acked); err != nil {
		return nil, bad("the meter's callback could not be registered: %v", err)
	}
	var errLag, errRec error
	m.lag, errLag = newLagTable(mt, &c)
	m.records, errRec = newRecords(mt, &c)
	for _, err := range []error{errLag, errRec} {
		if err != nil {
			return nil, bad("an instrument could not be made: %v", err)
		}
	}

	m.sOutcome = telemetry.NewSeries(func(k outcomeKey) *count {
		return newCount(m.attrs("scope", k.scope, "source", k.source, "outcome", telemetry.OutcomeLabel(k.outcome),
			"action", telemetry.ActionLabel(k.source, k.action), "kind", k.kind)...)
	})
	m.sRunning = telemetry.NewSeries(func(scope string) *count { return newCount(m.attrs("scope", scope)...) })
	m.sLost = telemetry.NewSeries(func(scope string) *count { return newCount(m.attrs("scope", scope)...) })
	m.sTaken = telemetry.NewSeries(func(scope string) *count { return newCount(m.attrs("scope", scope)...) })
	m.sAnswers = telemetry.NewSeries(func(scope string) [5]*count {
		var a [5]*count
		for i, name := range answerNames {
			a[i] = newCount(m.attrs("scope", scope, "answer", name)...)
		}
		return a
	})
	m.sHandler = telemetry.NewSeries(func(k scopeKind) []metric.RecordOption {
		return recordOpts(m.attrs("scope", k.scope, "kind", k.kind)...)
	})
	m.sStore = telemetry.NewSeries(func(k scopeOp) storeSeries {
		kvs := m.attrs("scope", k.scope, "op", k.op)
		return storeSeries{latency: recordOpts(kvs...), messages: newCount(kvs...)}
	})
	bySource := func(k sourceScopeKind) *count {
		return newCount(m.attrs("source", k.source, "scope", k.scope, "kind", k.kind)...)
	}
	m.sRetry, m.sDead = telemetry.NewSeries(bySource), telemetry.NewSeries(bySource)
	m.sBodyless = telemetry.NewSeries(func(k sourceScopeKind) *count { return newCount(m.attrs("source", k.source, "scope", k.scope)...) })
	m.sCommit = telemetry.NewSeries(func(k sourceDest) *count {
		return newCount(attribute.String("source", k.source), attribute.String("topic", k.dest))
	})
	m.sAck = telemetry.NewSeries(func(k sourceDest) [2]*count {
		kvs := []attribute.KeyValue{attribute.String("source", k.source), attribute.String("queue", k.dest)}
		return [2]*count{newCount(kvs...), newCount(kvs...)}
	})
	return m, nil
}

// observe reports every count (the callback of the observable instruments).
func (m *Meter) observe(_ context.Context, o metric.Observer) error {
	each := func(inst metric.Int64Observable, cs []*count) {
		for _, c := range cs {
			o.ObserveInt64(inst, c.n.Load(), c.attrs)
		}
	}
	each(m.outcomes, m.sOutcome.Values())
	each(m.running, m.sRunning.Values())
	each(m.leasesLost, m.sLost.Values())
	each(m.takeovers, m.sTaken.Values())
	for _, a := range m.sAnswers.Values() {
		each(m.answers, a[:])
	}
	for _, st := range m.sStore.Values() {
		each(m.storeMsgs, []*count{st.messages})
	}
	each(m.retries, m.sRetry.Values())
	each(m.deadLetters, m.sDead.Values())
	each(m.bodyless, m.sBodyless.Values())
	each(m.commits, m.sCommit.Values())
	for _, a := range m.sAck.Values() {
		each(m.acks, a[:1])
		each(m.acked, a[1:])
	}
	return nil
}

// attrs returns the kept attributes of name, value pairs.
func (m *Meter) attrs(pairs ...string) []attribute.KeyValue {
	out := make([]attribute.KeyValue, 0, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		if (pairs[i] == "scope" && !m.cfg.scopeAttr) || (pairs[i] == "kind" && !m.cfg.kindAttr) {
			continue
		}
		out = append(out, attribute.String(pairs[i], pairs[i+1]))
	}
	return out
}

// scope is the scope's attribute value: "" when the attribute is dropped, so every
// scope shares one series.
func (m *Meter) scope(s string) string {
	if !m.cfg.scopeAttr {
		return ""
	}
	return s
}

// kind is the kind's attribute value (consumer.KindLabel), "" when dropped.
func (m *Meter) kind(k string) string {
	if !m.cfg.kindAttr {
		return ""
	}
	return telemetry.KindLabel(k)
}

// Events carry no context; histogram measurements are taken without one.
var bg = context.Background()

// OnClaim records a claim call: its latency, its messages and their answers.
func (m *Meter) OnClaim(e consumer.ClaimEvent) {
	scope := m.scope(e.Scope)
	st := m.sStore.Get(scopeOp{scope, "claim"})
	m.storeLatency.Record(bg, e.Latency.Seconds(), st.latency...)
	st.messages.n.Add(int64(e.Messages))
	a := m.sAnswers.Get(scope)
	for i, n := range [5]int{e.Claimed, e.Duplicates, e.InProgress, e.Conflicts, e.Errors} {
		if n > 0 {
			a[i].n.Add(int64(n))
		}
	}
	taken := m.sTaken.Get(scope) // made at the scope's first claim, so that it reads 0 before any takeover
	if e.TakenOver > 0 {
		taken.n.Add(int64(e.TakenOver))
	}
}

// OnHandlerStart counts a running handler.
func (m *Meter) OnHandlerStart(e consumer.HandlerEvent) { m.sRunning.Get(m.scope(e.Scope)).n.Add(1) }

// OnHandlerEnd records a handler's duration.
func (m *Meter) OnHandlerEnd(e consumer.HandlerEvent) {
	scope := m.scope(e.Scope)
	m.sRunning.Get(scope).n.Add(-1)
	m.handler.Record(bg, e.Duration.Seconds(), m.sHandler.Get(scopeKind{scope, m.kind(e.Kind)})...)
}

// OnLeaseRenewed records a renewal call's latency and messages.
func (m *Meter) OnLeaseRenewed(e consumer.LeaseEvent) {
	st := m.sStore.Get(scopeOp{m.scope(e.Scope), "renew"})
	m.storeLatency.Record(bg, e.Latency.Seconds(), st.latency...)
	st.messages.n.Add(int64(e.Messages))
}

// OnLeaseLost counts a lost lease.
func (m *Meter) OnLeaseLost(e consumer.LeaseEvent) { m.sLost.Get(m.scope(e.Scope)).n.Add(1) }

// OnSettle records a settle call's latency and messages.
func (m *Meter) OnSettle(e consumer.SettleEvent) {
	st := m.sStore.Get(scopeOp{m.scope(e.Scope), "settle"})
	m.storeLatency.Record(bg, e.Latency.Seconds(), st.latency...)
	st.messages.n.Add(int64(e.Messages))
}

// OnOutcome counts a message's outcome.
func (m *Meter) OnOutcome(e consumer.OutcomeEvent) {
	m.sOutcome.Get(outcomeKey{scope: m.scope(e.Scope), source: e.Source, outcome: e.Outcome, action: e.Action,
		kind: m.kind(e.Kind)}).n.Add(1)
}

// OnRetry counts a scheduled retry.
func (m *Meter) OnRetry(e consumer.RetryEvent) {
	m.sRetry.Get(sourceScopeKind{e.Source, m.scope(e.Scope), m.kind(e.Kind)}).n.Add(1)
}

// OnDeadLetter counts a confirmed dead-letter copy.
func (m *Meter) OnDeadLetter(e consumer.DeadLetterEvent) {
	scope := m.scope(e.Scope)
	m.sDead.Get(sourceScopeKind{e.Source, scope, m.kind(e.Kind)}).n.Add(1)
	if e.BodyLess {
		m.sBodyless.Get(sourceScopeKind{e.Source, scope, ""}).n.Add(1)
	}
}

// OnCommit counts a committed offset and keeps its partition's lag when known;
// a failed commit counts for neither.
func (m *Meter) OnCommit(e consumer.CommitEvent) {
	if e.Err != nil {
		return
	}
	m.sCommit.Get(sourceDest{e.Source, e.Topic}).n.Add(1)
	if e.Lag >= 0 {
		m.lag.set(e.Topic, e.Partition, e.Lag)
	}
}

// OnAck counts an acknowledgement and the deliveries it settled.
func (m *Meter) OnAck(e consumer.AckEvent) {
	c := m.sAck.Get(sourceDest{e.Source, e.Queue})
	c[0].n.Add(1)
	c[1].n.Add(int64(e.Messages))
}
