package idemotel

import (
	"context"
	"strings"

	"github.com/idemkit/idemkit/consumer"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Meter is an observer (consumer.WithObserver) that records what it is told on
// OpenTelemetry instruments. One Meter may observe any number of stores. Make it
// with NewMeter.
type Meter struct {
	cfg meterCfg

	outcomes     metric.Int64Counter
	handler      metric.Float64Histogram
	running      metric.Int64UpDownCounter
	storeLatency metric.Float64Histogram
	storeMsgs    metric.Int64Counter
	answers      metric.Int64Counter
	leasesLost   metric.Int64Counter
	retries      metric.Int64Counter
	deadLetters  metric.Int64Counter
	bodyless     metric.Int64Counter
	commits      metric.Int64Counter
	acks         metric.Int64Counter
	acked        metric.Int64Counter
	lag          *lagTable
	records      *records

	sOutcome *series[outcomeKey, opts]
	sHandler *series[scopeKind, opts]
	sScope   *series[string, opts]
	sStore   *series[scopeOp, opts]
	sAnswers *series[string, [5]opts]
	sSource  *series[sourceScopeKind, opts]
	sDest    *series[destKey, opts]
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

// opts are the measurement options of one attribute set, built once.
type opts struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

func optsOf(kvs ...attribute.KeyValue) opts {
	o := metric.WithAttributeSet(attribute.NewSet(kvs...))
	return opts{add: []metric.AddOption{o}, rec: []metric.RecordOption{o}}
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
	sourceScopeKind struct{ what, source, scope, kind string } // what: retry, dead, bodyless
	destKey         struct{ what, source, dest string }        // what: commit, ack
)

var answerNames = [5]string{"claimed", "duplicate", "in_progress", "conflict", "error"}

// NewMeter returns a Meter configured by opts, or an error that names a bad
// option or says why an instrument could not be made.
func NewMeter(options ...MeterOpt) (*Meter, error) {
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
	counter := func(name, unit, desc string) metric.Int64Counter {
		i, err := mt.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
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
	m.running, err = mt.Int64UpDownCounter("idemkit.handlers.running", metric.WithUnit("{handler}"),
		metric.WithDescription("Handlers running now."))
	errs = append(errs, err)
	m.storeLatency = histogram("idemkit.store.latency", "How long store calls took (op: claim, settle, renew).", c.storeBounds)
	m.storeMsgs = counter("idemkit.store.messages", "{message}", "Messages the store calls carried.")
	m.answers = counter("idemkit.claim.answers", "{message}", "What claims found: claimed, duplicate, in_progress (another owner at work), conflict, error.")
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
	var errLag, errRec error
	m.lag, errLag = newLagTable(mt, &c)
	m.records, errRec = newRecords(mt, &c)
	for _, err := range []error{errLag, errRec} {
		if err != nil {
			return nil, bad("an instrument could not be made: %v", err)
		}
	}

	m.sOutcome = newSeries(func(k outcomeKey) opts {
		return optsOf(m.attrs("scope", k.scope, "source", k.source, "outcome", strings.ToLower(k.outcome.String()),
			"action", k.action.String(), "kind", k.kind)...)
	})
	m.sHandler = newSeries(func(k scopeKind) opts { return optsOf(m.attrs("scope", k.scope, "kind", k.kind)...) })
	m.sScope = newSeries(func(scope string) opts { return optsOf(m.attrs("scope", scope)...) })
	m.sStore = newSeries(func(k scopeOp) opts { return optsOf(m.attrs("scope", k.scope, "op", k.op)...) })
	m.sAnswers = newSeries(func(scope string) [5]opts {
		var a [5]opts
		for i, name := range answerNames {
			a[i] = optsOf(m.attrs("scope", scope, "answer", name)...)
		}
		return a
	})
	m.sSource = newSeries(func(k sourceScopeKind) opts {
		if k.what == "bodyless" {
			return optsOf(m.attrs("source", k.source, "scope", k.scope)...)
		}
		return optsOf(m.attrs("source", k.source, "scope", k.scope, "kind", k.kind)...)
	})
	m.sDest = newSeries(func(k destKey) opts {
		name := "topic"
		if k.what == "ack" {
			name = "queue"
		}
		return optsOf(attribute.String("source", k.source), attribute.String(name, k.dest))
	})
	return m, nil
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

// kind is the kind's attribute value: "none" without an error, "" when dropped.
func (m *Meter) kind(k string) string {
	switch {
	case !m.cfg.kindAttr:
		return ""
	case k == "":
		return "none"
	}
	return k
}

// Events carry no context; measurements are taken without one.
var bg = context.Background()

// OnClaim records a claim call: its latency, its messages and their answers.
func (m *Meter) OnClaim(e consumer.ClaimEvent) {
	scope := m.scope(e.Scope)
	o := m.sStore.get(scopeOp{scope, "claim"})
	m.storeLatency.Record(bg, e.Latency.Seconds(), o.rec...)
	m.storeMsgs.Add(bg, int64(e.Messages), o.add...)
	a := m.sAnswers.get(scope)
	for i, n := range [5]int{e.Claimed, e.Duplicates, e.InProgress, e.Conflicts, e.Errors} {
		if n > 0 {
			m.answers.Add(bg, int64(n), a[i].add...)
		}
	}
}

// OnHandlerStart counts a running handler.
func (m *Meter) OnHandlerStart(e consumer.HandlerEvent) {
	m.running.Add(bg, 1, m.sScope.get(m.scope(e.Scope)).add...)
}

// OnHandlerEnd records a handler's duration.
func (m *Meter) OnHandlerEnd(e consumer.HandlerEvent) {
	scope := m.scope(e.Scope)
	m.running.Add(bg, -1, m.sScope.get(scope).add...)
	m.handler.Record(bg, e.Duration.Seconds(), m.sHandler.get(scopeKind{scope, m.kind(e.Kind)}).rec...)
}

// OnLeaseRenewed records a renewal call's latency and messages.
func (m *Meter) OnLeaseRenewed(e consumer.LeaseEvent) {
	o := m.sStore.get(scopeOp{m.scope(e.Scope), "renew"})
	m.storeLatency.Record(bg, e.Latency.Seconds(), o.rec...)
	m.storeMsgs.Add(bg, int64(e.Messages), o.add...)
}

// OnLeaseLost counts a lost lease.
func (m *Meter) OnLeaseLost(e consumer.LeaseEvent) {
	m.leasesLost.Add(bg, 1, m.sScope.get(m.scope(e.Scope)).add...)
}

// OnSettle records a settle call's latency and messages.
func (m *Meter) OnSettle(e consumer.SettleEvent) {
	o := m.sStore.get(scopeOp{m.scope(e.Scope), "settle"})
	m.storeLatency.Record(bg, e.Latency.Seconds(), o.rec...)
	m.storeMsgs.Add(bg, int64(e.Messages), o.add...)
}

// OnOutcome counts a message's outcome.
func (m *Meter) OnOutcome(e consumer.OutcomeEvent) {
	o := m.sOutcome.get(outcomeKey{scope: m.scope(e.Scope), source: e.Source, outcome: e.Outcome, action: e.Action, kind: m.kind(e.Kind)})
	m.outcomes.Add(bg, 1, o.add...)
}

// OnRetry counts a scheduled retry.
func (m *Meter) OnRetry(e consumer.RetryEvent) {
	m.retries.Add(bg, 1, m.sSource.get(sourceScopeKind{"retry", e.Source, m.scope(e.Scope), m.kind(e.Kind)}).add...)
}

// OnDeadLetter counts a confirmed dead-letter copy.
func (m *Meter) OnDeadLetter(e consumer.DeadLetterEvent) {
	scope := m.scope(e.Scope)
	m.deadLetters.Add(bg, 1, m.sSource.get(sourceScopeKind{"dead", e.Source, scope, m.kind(e.Kind)}).add...)
	if e.BodyLess {
		m.bodyless.Add(bg, 1, m.sSource.get(sourceScopeKind{"bodyless", e.Source, scope, ""}).add...)
	}
}

// OnCommit counts a committed offset and keeps its partition's lag when known.
func (m *Meter) OnCommit(e consumer.CommitEvent) {
	m.commits.Add(bg, 1, m.sDest.get(destKey{"commit", e.Source, e.Topic}).add...)
	if e.Lag >= 0 {
		m.lag.set(e.Topic, e.Partition, e.Lag)
	}
}

// OnAck counts an acknowledgement and the deliveries it settled.
func (m *Meter) OnAck(e consumer.AckEvent) {
	o := m.sDest.get(destKey{"ack", e.Source, e.Queue})
	m.acks.Add(bg, 1, o.add...)
	m.acked.Add(bg, int64(e.Messages), o.add...)
}
