package idemotel

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// StateCounter counts a store's records by state ("started", "completed",
// "failed", "retry", ...). sampled says the counts are those of a sample of the
// records (the count stopped early to bound its cost), not of all of them. It is
// called during the meter's collection, at most once per WithRecordInterval, with
// a context bounded by WithRecordTimeout.
//
// The operator plane's inspector counts records this way; wrap its count in a
// StateCounterFunc. The Prometheus plugin declares the same interface, so one
// counter serves both.
type StateCounter interface {
	CountByState(ctx context.Context) (counts map[string]int64, sampled bool, err error)
}

// StateCounterFunc makes a function a StateCounter.
type StateCounterFunc func(ctx context.Context) (map[string]int64, bool, error)

// CountByState calls f.
func (f StateCounterFunc) CountByState(ctx context.Context) (map[string]int64, bool, error) {
	return f(ctx)
}

// records observes the counts of every configured StateCounter.
type records struct {
	every, timeout time.Duration
	log            *slog.Logger
	now            func() time.Time
	scopeAttr      bool
	counters       []*counted

	records, sampled metric.Int64ObservableGauge
	took             metric.Float64ObservableGauge
	errors           metric.Int64Counter
}

// counted is one StateCounter and its last count.
type counted struct {
	scope string
	c     StateCounter

	mu      sync.Mutex
	at      time.Time // when the last count was taken; zero before the first
	ok      bool
	counts  map[string]int64
	sampled bool
	took    time.Duration
}

func newRecords(mt metric.Meter, c *meterCfg) (*records, error) {
	r := &records{every: c.recordEvery, timeout: c.recordTimeout, log: c.logger, now: c.now, scopeAttr: c.scopeAttr}
	if len(c.counters) == 0 {
		return r, nil // no instruments: a provider shows none of them
	}
	for _, sc := range c.counters {
		r.counters = append(r.counters, &counted{scope: sc.scope, c: sc.c})
	}
	var err error
	if r.records, err = mt.Int64ObservableGauge("idemkit.records", metric.WithUnit("{record}"),
		metric.WithDescription("Records by state, counted at collection time.")); err != nil {
		return nil, err
	}
	if r.sampled, err = mt.Int64ObservableGauge("idemkit.records.sampled",
		metric.WithDescription("1 when the record counts are those of a sample (the count stopped early), 0 when of every record.")); err != nil {
		return nil, err
	}
	r.took, err = mt.Float64ObservableGauge("idemkit.record_count", metric.WithUnit("s"),
		metric.WithDescription("How long the last record count took."))
	if err != nil {
		return nil, err
	}
	if r.errors, err = mt.Int64Counter("idemkit.record_count.errors", metric.WithUnit("{count}"),
		metric.WithDescription("Record counts that failed or ran out of time.")); err != nil {
		return nil, err
	}
	_, err = mt.RegisterCallback(r.observe, r.records, r.sampled, r.took)
	return r, err
}

// observe counts again where the last count is older than the interval, then
// observes every counter's last successful count.
func (r *records) observe(ctx context.Context, o metric.Observer) error {
	for _, c := range r.counters {
		r.observeOne(ctx, c, o)
	}
	return nil
}

func (r *records) observeOne(ctx context.Context, c *counted, o metric.Observer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var scope []attribute.KeyValue
	if r.scopeAttr {
		scope = []attribute.KeyValue{attribute.String("scope", c.scope)}
	}
	if c.at.IsZero() || r.now().Sub(c.at) >= r.every {
		r.count(ctx, c, scope)
	}
	if !c.ok {
		return
	}
	for state, n := range c.counts {
		o.ObserveInt64(r.records, n, metric.WithAttributes(append(scope[:len(scope):len(scope)], attribute.String("state", state))...))
	}
	sampled := int64(0)
	if c.sampled {
		sampled = 1
	}
	o.ObserveInt64(r.sampled, sampled, metric.WithAttributes(scope...))
	o.ObserveFloat64(r.took, c.took.Seconds(), metric.WithAttributes(scope...))
}

// count takes c's count, bounded by the timeout. c.mu is held.
func (r *records) count(ctx context.Context, c *counted, scope []attribute.KeyValue) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	began := r.now()
	counts, sampled, err := safeCount(ctx, c.c)
	c.at = r.now()
	c.took = c.at.Sub(began)
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		c.ok, c.counts = false, nil
		r.errors.Add(context.Background(), 1, metric.WithAttributes(scope...))
		r.log.Warn("idemotel: record count failed: no record measurements until the next count succeeds",
			"scope", c.scope, "err", err)
		return
	}
	c.ok, c.counts, c.sampled = true, counts, sampled
}

// safeCount calls c, turning a panic into an error: a collection must not take
// the process down.
func safeCount(ctx context.Context, c StateCounter) (counts map[string]int64, sampled bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("idemotel: the state counter panicked: %v", p)
		}
	}()
	return c.CountByState(ctx)
}
