package idemprom

import (
	"fmt"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/telemetry"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics is an observer (consumer.WithObserver) that counts what it is told, and
// a prometheus.Collector: register it on a registry. One Metrics may observe any
// number of stores. Make it with New.
type Metrics struct {
	cfg cfg
	lbl labeler

	outcomes     *prometheus.CounterVec
	handler      *prometheus.HistogramVec
	running      *prometheus.GaugeVec
	storeLatency *prometheus.HistogramVec
	storeMsgs    *prometheus.CounterVec
	answers      *prometheus.CounterVec
	takeovers    *prometheus.CounterVec
	leasesLost   *prometheus.CounterVec
	retries      *prometheus.CounterVec
	deadLetters  *prometheus.CounterVec
	bodyless     *prometheus.CounterVec
	commits      *prometheus.CounterVec
	acks         *prometheus.CounterVec
	acked        *prometheus.CounterVec
	lag          *lagTable
	records      *records

	sOutcome  *telemetry.Series[outcomeKey, prometheus.Counter]
	sHandler  *telemetry.Series[scopeKind, prometheus.Observer]
	sRunning  *telemetry.Series[string, prometheus.Gauge]
	sStore    *telemetry.Series[scopeOp, storeChildren]
	sAnswers  *telemetry.Series[string, answerChildren]
	sTaken    *telemetry.Series[string, prometheus.Counter]
	sLost     *telemetry.Series[string, prometheus.Counter]
	sRetry    *telemetry.Series[sourceScopeKind, prometheus.Counter]
	sDead     *telemetry.Series[sourceScopeKind, prometheus.Counter]
	sBodyless *telemetry.Series[sourceScope, prometheus.Counter]
	sCommit   *telemetry.Series[sourceScope, prometheus.Counter]
	sAck      *telemetry.Series[sourceScope, [2]prometheus.Counter]
}

// Compile-time checks: Metrics implements every hook it means to.
var (
	_ prometheus.Collector    = (*Metrics)(nil)
	_ consumer.ClaimHook      = (*Metrics)(nil)
	_ consumer.HandlerHook    = (*Metrics)(nil)
	_ consumer.LeaseHook      = (*Metrics)(nil)
	_ consumer.SettleHook     = (*Metrics)(nil)
	_ consumer.OutcomeHook    = (*Metrics)(nil)
	_ consumer.RetryHook      = (*Metrics)(nil)
	_ consumer.DeadLetterHook = (*Metrics)(nil)
	_ consumer.CommitHook     = (*Metrics)(nil)
	_ consumer.AckHook        = (*Metrics)(nil)
)

type (
	outcomeKey struct {
		scope, source string
		outcome       consumer.Outcome
		action        consumer.Action
		kind          string
	}
	scopeKind       struct{ scope, kind string }
	scopeOp         struct{ scope, op string }
	sourceScope     struct{ source, scope string } // scope holds the topic or queue for commits and acks
	sourceScopeKind struct{ source, scope, kind string }
	storeChildren   struct {
		latency  prometheus.Observer
		messages prometheus.Counter
	}
	answerChildren [5]prometheus.Counter // claimed, duplicate, in_progress, conflict, error
)

var answerNames = [5]string{"claimed", "duplicate", "in_progress", "conflict", "error"}

// New returns Metrics configured by opts, or an error that names a bad option.
func New(opts ...Option) (*Metrics, error) {
	c := defaults()
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", errConfig)
		}
		o.apply(&c)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	m := &Metrics{cfg: c, lbl: labeler{keepScope: c.scopeLabel, keepKind: c.kindLabel}}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: c.namespace, Name: name, Help: help,
			ConstLabels: c.constLabels}, m.lbl.names(labels...))
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		o := prometheus.HistogramOpts{Namespace: c.namespace, Name: name, Help: help, ConstLabels: c.constLabels, Buckets: buckets}
		if c.native {
			o.NativeHistogramBucketFactor = 1.1
			o.NativeHistogramMaxBucketNumber = 160
			o.NativeHistogramMinResetDuration = time.Hour
		}
		return prometheus.NewHistogramVec(o, m.lbl.names(labels...))
	}
	m.outcomes = counter("outcomes_total", "Messages by the outcome of their execution.", "scope", "source", "outcome", "action", "kind")
	m.handler = histogram("handler_duration_seconds", "How long handlers ran.", c.handlerBuckets, "scope", "kind")
	m.running = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: c.namespace, Name: "handlers_running",
		Help: "Handlers running now.", ConstLabels: c.constLabels}, m.lbl.names("scope"))
	m.storeLatency = histogram("store_latency_seconds", "How long store calls took (op: claim, settle, renew).", c.storeBuckets, "scope", "op")
	m.storeMsgs = counter("store_messages_total", "Messages the store calls carried.", "scope", "op")
	m.answers = counter("claim_answers_total", "What claims found: claimed, duplicate, in_progress (another owner at work), conflict, error.", "scope", "answer")
	m.takeovers = counter("claim_takeovers_total", "Claims that took over a record whose owner crashed or stalled (its lease ran out, or its lock holder was gone); counted as claimed too.", "scope")
	m.leasesLost = counter("leases_lost_total", "Attempts stopped because their lease was lost.", "scope")
	m.retries = counter("retries_total", "Retries adapters scheduled.", "source", "scope", "kind")
	m.deadLetters = counter("dead_letters_total", "Dead-letter copies the broker confirmed.", "source", "scope", "kind")
	m.bodyless = counter("dead_letters_bodyless_total", "Dead-letter copies sent without their body (the broker refused the full copy).", "source", "scope")
	m.commits = counter("commits_total", "Offsets committed.", "source", "topic")
	m.acks = counter("acks_total", "Acknowledgements sent.", "source", "queue")
	m.acked = counter("acked_messages_total", "Deliveries acknowledgements settled.", "source", "queue")
	m.lag = newLagTable(&c)
	m.records = newRecords(&c, m.lbl)

	m.sOutcome = telemetry.NewSeries(func(k outcomeKey) prometheus.Counter {
		return m.outcomes.With(m.lbl.labels("scope", k.scope, "source", k.source, "outcome", telemetry.OutcomeLabel(k.outcome),
			"action", telemetry.ActionLabel(k.source, k.action), "kind", k.kind))
	})
	m.sHandler = telemetry.NewSeries(func(k scopeKind) prometheus.Observer {
		return m.handler.With(m.lbl.labels("scope", k.scope, "kind", k.kind))
	})
	m.sRunning = telemetry.NewSeries(func(scope string) prometheus.Gauge { return m.running.With(m.lbl.labels("scope", scope)) })
	m.sStore = telemetry.NewSeries(func(k scopeOp) storeChildren {
		l := m.lbl.labels("scope", k.scope, "op", k.op)
		return storeChildren{latency: m.storeLatency.With(l), messages: m.storeMsgs.With(l)}
	})
	m.sAnswers = telemetry.NewSeries(func(scope string) answerChildren {
		var a answerChildren
		for i, name := range answerNames {
			a[i] = m.answers.With(m.lbl.labels("scope", scope, "answer", name))
		}
		return a
	})
	m.sTaken = telemetry.NewSeries(func(scope string) prometheus.Counter { return m.takeovers.With(m.lbl.labels("scope", scope)) })
	m.sLost = telemetry.NewSeries(func(scope string) prometheus.Counter { return m.leasesLost.With(m.lbl.labels("scope", scope)) })
	m.sRetry = telemetry.NewSeries(func(k sourceScopeKind) prometheus.Counter {
		return m.retries.With(m.lbl.labels("source", k.source, "scope", k.scope, "kind", k.kind))
	})
	m.sDead = telemetry.NewSeries(func(k sourceScopeKind) prometheus.Counter {
		return m.deadLetters.With(m.lbl.labels("source", k.source, "scope", k.scope, "kind", k.kind))
	})
	m.sBodyless = telemetry.NewSeries(func(k sourceScope) prometheus.Counter {
		return m.bodyless.With(m.lbl.labels("source", k.source, "scope", k.scope))
	})
	m.sCommit = telemetry.NewSeries(func(k sourceScope) prometheus.Counter {
		return m.commits.With(prometheus.Labels{"source": k.source, "topic": k.scope})
	})
	m.sAck = telemetry.NewSeries(func(k sourceScope) [2]prometheus.Counter {
		l := prometheus.Labels{"source": k.source, "queue": k.scope}
		return [2]prometheus.Counter{m.acks.With(l), m.acked.With(l)}
	})
	return m, nil
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.outcomes, m.handler, m.running, m.storeLatency, m.storeMsgs, m.answers,
		m.takeovers, m.leasesLost, m.retries, m.deadLetters, m.bodyless, m.commits, m.acks, m.acked, m.lag, m.records}
}

// Describe sends the descriptions of every metric (prometheus.Collector).
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect sends every metric's current values, counting records first when a
// StateCounter is configured and its last count is older than
// WithRecordInterval (prometheus.Collector).
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// OnClaim counts a claim call: its latency, its messages and their answers.
func (m *Metrics) OnClaim(e consumer.ClaimEvent) {
	scope := m.lbl.scope(e.Scope)
	st := m.sStore.Get(scopeOp{scope, "claim"})
	st.latency.Observe(e.Latency.Seconds())
	st.messages.Add(float64(e.Messages))
	a := m.sAnswers.Get(scope)
	for i, n := range [5]int{e.Claimed, e.Duplicates, e.InProgress, e.Conflicts, e.Errors} {
		if n > 0 {
			a[i].Add(float64(n))
		}
	}
	taken := m.sTaken.Get(scope) // made at the scope's first claim, so that it reads 0 before any takeover
	if e.TakenOver > 0 {
		taken.Add(float64(e.TakenOver))
	}
}

// OnHandlerStart counts a running handler.
func (m *Metrics) OnHandlerStart(e consumer.HandlerEvent) {
	m.sRunning.Get(m.lbl.scope(e.Scope)).Inc()
}

// OnHandlerEnd observes a handler's duration.
func (m *Metrics) OnHandlerEnd(e consumer.HandlerEvent) {
	scope := m.lbl.scope(e.Scope)
	m.sRunning.Get(scope).Dec()
	m.sHandler.Get(scopeKind{scope, m.lbl.kind(e.Kind)}).Observe(e.Duration.Seconds())
}

// OnLeaseRenewed observes a renewal call's latency and messages.
func (m *Metrics) OnLeaseRenewed(e consumer.LeaseEvent) {
	st := m.sStore.Get(scopeOp{m.lbl.scope(e.Scope), "renew"})
	st.latency.Observe(e.Latency.Seconds())
	st.messages.Add(float64(e.Messages))
}

// OnLeaseLost counts a lost lease.
func (m *Metrics) OnLeaseLost(e consumer.LeaseEvent) { m.sLost.Get(m.lbl.scope(e.Scope)).Inc() }

// OnSettle observes a settle call's latency and messages.
func (m *Metrics) OnSettle(e consumer.SettleEvent) {
	st := m.sStore.Get(scopeOp{m.lbl.scope(e.Scope), "settle"})
	st.latency.Observe(e.Latency.Seconds())
	st.messages.Add(float64(e.Messages))
}

// OnOutcome counts a message's outcome.
func (m *Metrics) OnOutcome(e consumer.OutcomeEvent) {
	m.sOutcome.Get(outcomeKey{scope: m.lbl.scope(e.Scope), source: e.Source, outcome: e.Outcome, action: e.Action,
		kind: m.lbl.kind(e.Kind)}).Inc()
}

// OnRetry counts a scheduled retry.
func (m *Metrics) OnRetry(e consumer.RetryEvent) {
	m.sRetry.Get(sourceScopeKind{e.Source, m.lbl.scope(e.Scope), m.lbl.kind(e.Kind)}).Inc()
}

// OnDeadLetter counts a confirmed dead-letter copy.
func (m *Metrics) OnDeadLetter(e consumer.DeadLetterEvent) {
	scope := m.lbl.scope(e.Scope)
	m.sDead.Get(sourceScopeKind{e.Source, scope, m.lbl.kind(e.Kind)}).Inc()
	if e.BodyLess {
		m.sBodyless.Get(sourceScope{e.Source, scope}).Inc()
	}
}

// OnCommit counts a committed offset and sets its partition's lag when known; a
// failed commit counts for neither.
func (m *Metrics) OnCommit(e consumer.CommitEvent) {
	if e.Err != nil {
		return
	}
	m.sCommit.Get(sourceScope{e.Source, e.Topic}).Inc()
	if e.Lag >= 0 {
		m.lag.set(e.Topic, e.Partition, e.Lag)
	}
}

// OnAck counts an acknowledgement and the deliveries it settled.
func (m *Metrics) OnAck(e consumer.AckEvent) {
	c := m.sAck.Get(sourceScope{e.Source, e.Queue})
	c[0].Inc()
	c[1].Add(float64(e.Messages))
}

// labeler leaves out the labels the options drop.
type labeler struct{ keepScope, keepKind bool }

func (l labeler) keep(name string) bool {
	return (name != "scope" || l.keepScope) && (name != "kind" || l.keepKind)
}

// names returns the label names that are kept.
func (l labeler) names(names ...string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		if l.keep(n) {
			out = append(out, n)
		}
	}
	return out
}

// labels returns the kept labels of name, value pairs.
func (l labeler) labels(pairs ...string) prometheus.Labels {
	out := make(prometheus.Labels, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		if l.keep(pairs[i]) {
			out[pairs[i]] = pairs[i+1]
		}
	}
	return out
}

// scope is the scope's label value: "" when the label is dropped, so every scope
// shares one series.
func (l labeler) scope(s string) string {
	if !l.keepScope {
		return ""
	}
	return s
}

// kind is the kind's label value (consumer.KindLabel), "" when dropped.
func (l labeler) kind(k string) string {
	if !l.keepKind {
		return ""
	}
	return telemetry.KindLabel(k)
}
