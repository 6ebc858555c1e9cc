package idemprom

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// StateCounter counts a store's records by state ("started", "completed",
// "failed", "retry", ...). sampled says the counts are those of a sample of the
// records (the count stopped early to bound its cost), not of all of them. It is
// called at scrape time, at most once per WithRecordInterval, with a context
// bounded by WithRecordTimeout.
//
// The operator plane's inspector counts records this way; wrap its count in a
// StateCounterFunc.
type StateCounter interface {
	CountByState(ctx context.Context) (counts map[string]int64, sampled bool, err error)
}

// StateCounterFunc makes a function a StateCounter.
type StateCounterFunc func(ctx context.Context) (map[string]int64, bool, error)

// CountByState calls f.
func (f StateCounterFunc) CountByState(ctx context.Context) (map[string]int64, bool, error) {
	return f(ctx)
}

// records exports the counts of every configured StateCounter.
type records struct {
	every, timeout time.Duration
	log            *slog.Logger
	now            func() time.Time
	lbl            labeler
	counters       []*counted

	records, sampled, took *prometheus.Desc
	errors                 *prometheus.CounterVec
}

// counted is one StateCounter and its last count.
type counted struct {
	scope string
	c     StateCounter

	mu      sync.Mutex // one count at a time; a scrape during a count waits for it
	at      time.Time  // when the last count was taken; zero before the first
	ok      bool       // the last count succeeded
	counts  map[string]int64
	sampled bool
	took    time.Duration
}

func newRecords(c *cfg, lbl labeler) *records {
	scope := lbl.names("scope")
	r := &records{every: c.recordEvery, timeout: c.recordTimeout, log: c.logger, now: c.now, lbl: lbl,
		records: prometheus.NewDesc(prometheus.BuildFQName(c.namespace, "", "records"),
			"Records by state, counted at scrape time.", append(scope, "state"), c.constLabels),
		sampled: prometheus.NewDesc(prometheus.BuildFQName(c.namespace, "", "records_sampled"),
			"1 when the record counts are those of a sample (the count stopped early), 0 when of every record.", scope, c.constLabels),
		took: prometheus.NewDesc(prometheus.BuildFQName(c.namespace, "", "record_count_seconds"),
			"How long the last record count took.", scope, c.constLabels),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: c.namespace, Name: "record_count_errors_total",
			Help: "Record counts that failed or ran out of time.", ConstLabels: c.constLabels}, scope),
	}
	for _, sc := range c.counters {
		r.counters = append(r.counters, &counted{scope: sc.scope, c: sc.c})
	}
	return r
}

// Describe implements prometheus.Collector.
func (r *records) Describe(ch chan<- *prometheus.Desc) {
	ch <- r.records
	ch <- r.sampled
	ch <- r.took
	r.errors.Describe(ch)
}

// Collect implements prometheus.Collector: counts that are older than the
// interval are taken again first, one counter after another.
func (r *records) Collect(ch chan<- prometheus.Metric) {
	for _, c := range r.counters {
		r.collect(c, ch)
	}
	r.errors.Collect(ch)
}

func (r *records) collect(c *counted, ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() || r.now().Sub(c.at) >= r.every {
		r.count(c)
	}
	if !c.ok {
		return
	}
	var scope []string
	if r.lbl.keepScope {
		scope = []string{c.scope}
	}
	states := make([]string, 0, len(c.counts))
	for s := range c.counts {
		states = append(states, s)
	}
	sort.Strings(states)
	for _, s := range states {
		send(ch, r.records, float64(c.counts[s]), append(scope[:len(scope):len(scope)], s)...)
	}
	sampled := 0.0
	if c.sampled {
		sampled = 1
	}
	send(ch, r.sampled, sampled, scope...)
	send(ch, r.took, c.took.Seconds(), scope...)
}

// count takes c's count, bounded by the timeout. c.mu is held.
func (r *records) count(c *counted) {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	began := r.now()
	counts, sampled, err := safeCount(ctx, c.c)
	c.at, c.took = r.now(), r.now().Sub(began)
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		c.ok, c.counts = false, nil
		r.errors.With(r.lbl.labels("scope", c.scope)).Inc()
		r.log.Warn("idemprom: record count failed: no record metrics until the next count succeeds",
			"scope", c.scope, "err", err)
		return
	}
	c.ok, c.counts, c.sampled = true, counts, sampled
}

// safeCount calls c, turning a panic into an error: a scrape must not take the
// process down.
func safeCount(ctx context.Context, c StateCounter) (counts map[string]int64, sampled bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("idemprom: the state counter panicked: %v", p)
		}
	}()
	return c.CountByState(ctx)
}

func send(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	if m, err := prometheus.NewConstMetric(d, prometheus.GaugeValue, v, labels...); err == nil {
		ch <- m
	}
}
