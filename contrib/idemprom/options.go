package idemprom

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Option configures Metrics.
type Option interface{ apply(*cfg) }

type optFunc func(*cfg)

func (f optFunc) apply(c *cfg) { f(c) }

type cfg struct {
	namespace      string
	constLabels    prometheus.Labels
	scopeLabel     bool
	kindLabel      bool
	handlerBuckets []float64
	storeBuckets   []float64
	native         bool
	lagSeries      int
	lagExpiry      time.Duration
	counters       []scopedCounter
	recordEvery    time.Duration
	recordTimeout  time.Duration
	logger         *slog.Logger
	now            func() time.Time
}

type scopedCounter struct {
	scope string
	c     StateCounter
}

func defaults() cfg {
	return cfg{
		namespace:      "idemkit",
		scopeLabel:     true,
		kindLabel:      true,
		handlerBuckets: prometheus.ExponentialBuckets(0.001, 2, 16),  // 1ms .. 33s
		storeBuckets:   prometheus.ExponentialBuckets(0.0001, 2, 16), // 100us .. 3.3s
		lagSeries:      1000,
		lagExpiry:      5 * time.Minute,
		recordEvery:    30 * time.Second,
		recordTimeout:  5 * time.Second,
		logger:         slog.New(slog.DiscardHandler),
		now:            time.Now,
	}
}

// WithNamespace sets the prefix of every metric name. Default "idemkit"; "" leaves
// the names unprefixed.
func WithNamespace(ns string) Option { return optFunc(func(c *cfg) { c.namespace = ns }) }

// WithConstLabels adds labels with fixed values to every metric (a service or
// instance name, say). Default none.
func WithConstLabels(l prometheus.Labels) Option {
	return optFunc(func(c *cfg) { c.constLabels = l })
}

// WithScopeLabel keeps (true) or drops (false) the scope label of every metric.
// Drop it when a process uses many scopes and per-scope series are not worth
// their cost. Default true.
func WithScopeLabel(on bool) Option { return optFunc(func(c *cfg) { c.scopeLabel = on }) }

// WithKindLabel keeps (true) or drops (false) the kind label (the error's kind) of
// every metric. Default true.
func WithKindLabel(on bool) Option { return optFunc(func(c *cfg) { c.kindLabel = on }) }

// WithHandlerBuckets sets the classic buckets of the handler-duration histogram, in
// seconds, strictly increasing. Default 16 buckets doubling from 1 ms (to 33 s).
func WithHandlerBuckets(b []float64) Option {
	return optFunc(func(c *cfg) { c.handlerBuckets = b })
}

// WithStoreBuckets sets the classic buckets of the store-latency histogram, in
// seconds, strictly increasing. Default 16 buckets doubling from 100 us (to 3.3 s).
func WithStoreBuckets(b []float64) Option {
	return optFunc(func(c *cfg) { c.storeBuckets = b })
}

// WithNativeHistograms makes the histograms native histograms as well (bucket
// factor 1.1, at most 160 buckets, reset at most once an hour when they reach
// that), beside their classic buckets: a scraper that negotiates the protobuf
// format reads the native form, any other the classic one. Default false.
func WithNativeHistograms(on bool) Option { return optFunc(func(c *cfg) { c.native = on }) }

// WithLagSeries bounds how many topic/partition series the Kafka commit-lag gauge
// keeps: past it, the partition committed least recently is dropped. Default 1000.
func WithLagSeries(n int) Option { return optFunc(func(c *cfg) { c.lagSeries = n }) }

// WithLagExpiry drops a partition's commit-lag series when no commit was reported
// for it for d (its partition moved to another consumer, or its topic is no longer
// consumed), so a scrape never shows a lag frozen in the past. Default 5 minutes.
func WithLagExpiry(d time.Duration) Option { return optFunc(func(c *cfg) { c.lagExpiry = d }) }

// WithStateCounter adds a StateCounter whose record counts by state are exported
// under the scope label scope ("" when it counts every scope). Give it once per
// counter. Default none: no record metrics.
func WithStateCounter(scope string, sc StateCounter) Option {
	return optFunc(func(c *cfg) { c.counters = append(c.counters, scopedCounter{scope: scope, c: sc}) })
}

// WithRecordInterval is the least time between two record counts: a scrape within
// d of the last count reports that count again. Default 30 seconds; 0 counts at
// every scrape.
func WithRecordInterval(d time.Duration) Option { return optFunc(func(c *cfg) { c.recordEvery = d }) }

// WithRecordTimeout bounds one record count; a count that takes longer fails (and
// idemkit_record_count_errors_total says so). Default 5 seconds.
func WithRecordTimeout(d time.Duration) Option { return optFunc(func(c *cfg) { c.recordTimeout = d }) }

// WithLogger receives the errors of record counts, at warning level. Default: a
// logger that discards.
func WithLogger(l *slog.Logger) Option { return optFunc(func(c *cfg) { c.logger = l }) }

// errConfig is what every configuration error wraps.
var errConfig = errors.New("idemprom: invalid configuration")

func (c *cfg) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", errConfig, fmt.Sprintf(format, args...))
	}
	for _, b := range []struct {
		name string
		v    []float64
	}{{"WithHandlerBuckets", c.handlerBuckets}, {"WithStoreBuckets", c.storeBuckets}} {
		if len(b.v) == 0 {
			return bad("%s: give at least one bucket", b.name)
		}
		for i := 1; i < len(b.v); i++ {
			if b.v[i] <= b.v[i-1] {
				return bad("%s: buckets must increase strictly; %v follows %v", b.name, b.v[i], b.v[i-1])
			}
		}
	}
	switch {
	case c.lagSeries < 1:
		return bad("WithLagSeries(%d): keep at least 1 series", c.lagSeries)
	case c.lagExpiry <= 0:
		return bad("WithLagExpiry(%v): give a positive duration", c.lagExpiry)
	case c.recordEvery < 0:
		return bad("WithRecordInterval(%v): give 0 or more", c.recordEvery)
	case c.recordTimeout <= 0:
		return bad("WithRecordTimeout(%v): give a positive duration", c.recordTimeout)
	case c.logger == nil:
		return bad("WithLogger(nil): pass a logger, or leave the option out to discard")
	}
	seen := map[string]bool{}
	for _, sc := range c.counters {
		if sc.c == nil {
			return bad("WithStateCounter(%q, nil): pass a counter", sc.scope)
		}
		switch {
		case !c.scopeLabel && len(c.counters) > 1:
			return bad("%d state counters with WithScopeLabel(false): their series would be the same; give one", len(c.counters))
		case seen[sc.scope]:
			return bad("WithStateCounter(%q) given twice: give one counter per scope", sc.scope)
		}
		seen[sc.scope] = true
	}
	for name := range c.constLabels {
		switch name {
		case "scope", "source", "outcome", "action", "kind", "op", "answer", "topic", "partition", "queue", "state":
			return bad("WithConstLabels: %q is one of the metrics' own labels; name it otherwise", name)
		}
	}
	return nil
}
