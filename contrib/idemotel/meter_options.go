package idemotel

import (
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
)

// MeterOption configures a Meter.
type MeterOption interface{ applyMeter(*meterCfg) }

type meterOptFunc func(*meterCfg)

func (f meterOptFunc) applyMeter(c *meterCfg) { f(c) }

type meterCfg struct {
	provider      metric.MeterProvider
	scopeAttr     bool
	kindAttr      bool
	handlerBounds []float64
	storeBounds   []float64
	lagSeries     int
	lagExpiry     time.Duration
	counters      []scopedCounter
	recordEvery   time.Duration
	recordTimeout time.Duration
	logger        *slog.Logger
	now           func() time.Time
}

type scopedCounter struct {
	scope string
	c     StateCounter
}

// doubling returns n bounds doubling from first.
func doubling(first float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = first
		first *= 2
	}
	return out
}

func meterDefaults() meterCfg {
	return meterCfg{
		provider:      otel.GetMeterProvider(),
		scopeAttr:     true,
		kindAttr:      true,
		handlerBounds: doubling(0.001, 16),  // 1 ms .. 33 s
		storeBounds:   doubling(0.0001, 16), // 100 us .. 3.3 s
		lagSeries:     1000,
		lagExpiry:     5 * time.Minute,
		recordEvery:   30 * time.Second,
		recordTimeout: 5 * time.Second,
		logger:        slog.New(slog.DiscardHandler),
		now:           time.Now,
	}
}

// WithMeterProvider sets where measurements go. Default: the global provider
// (otel.GetMeterProvider) at the time NewMeter is called.
func WithMeterProvider(p metric.MeterProvider) MeterOption {
	return meterOptFunc(func(c *meterCfg) { c.provider = p })
}

// WithScopeAttribute keeps (true) or drops (false) the scope attribute of every
// instrument. Default true.
func WithScopeAttribute(on bool) MeterOption {
	return meterOptFunc(func(c *meterCfg) { c.scopeAttr = on })
}

// WithKindAttribute keeps (true) or drops (false) the kind attribute (the error's
// kind) of every instrument. Default true.
func WithKindAttribute(on bool) MeterOption {
	return meterOptFunc(func(c *meterCfg) { c.kindAttr = on })
}

// WithHandlerBoundaries sets the explicit bucket boundaries advised for the
// handler-duration histogram, in seconds, strictly increasing (a view may still
// override them). Default 16 boundaries doubling from 1 ms (to 33 s).
func WithHandlerBoundaries(b []float64) MeterOption {
	return meterOptFunc(func(c *meterCfg) { c.handlerBounds = b })
}

// WithStoreBoundaries sets the explicit bucket boundaries advised for the
// store-latency histogram, in seconds, strictly increasing. Default 16 boundaries
// doubling from 100 us (to 3.3 s).
func WithStoreBoundaries(b []float64) MeterOption {
	return meterOptFunc(func(c *meterCfg) { c.storeBounds = b })
}

// WithLagSeries bounds how many topic/partition series the Kafka commit-lag gauge
// keeps: past it, the partition committed least recently is dropped. Default 1000.
func WithLagSeries(n int) MeterOption { return meterOptFunc(func(c *meterCfg) { c.lagSeries = n }) }

// WithLagExpiry drops a partition's commit-lag series when no commit was reported
// for it for d (it moved to another consumer). Default 5 minutes.
func WithLagExpiry(d time.Duration) MeterOption {
	return meterOptFunc(func(c *meterCfg) { c.lagExpiry = d })
}

// WithStateCounter adds a StateCounter whose record counts by state are observed
// under the scope attribute scope ("" when it counts every scope). Give it once
// per counter. Default none: no record instruments are observed.
func WithStateCounter(scope string, sc StateCounter) MeterOption {
	return meterOptFunc(func(c *meterCfg) { c.counters = append(c.counters, scopedCounter{scope: scope, c: sc}) })
}

// WithRecordInterval is the least time between two record counts: a collection
// within d of the last count observes that count again. Default 30 seconds; 0
// counts at every collection.
func WithRecordInterval(d time.Duration) MeterOption {
	return meterOptFunc(func(c *meterCfg) { c.recordEvery = d })
}

// WithRecordTimeout bounds one record count; a count that takes longer fails (and
// idemkit.record_count.errors says so). Default 5 seconds.
func WithRecordTimeout(d time.Duration) MeterOption {
	return meterOptFunc(func(c *meterCfg) { c.recordTimeout = d })
}

// WithLogger receives the errors of record counts, at warning level. Default: a
// logger that discards.
func WithLogger(l *slog.Logger) MeterOption { return meterOptFunc(func(c *meterCfg) { c.logger = l }) }

func (c *meterCfg) validate() error {
	for _, b := range []struct {
		name string
		v    []float64
	}{{"WithHandlerBoundaries", c.handlerBounds}, {"WithStoreBoundaries", c.storeBounds}} {
		if len(b.v) == 0 {
			return bad("%s: give at least one boundary", b.name)
		}
		for i := 1; i < len(b.v); i++ {
			if b.v[i] <= b.v[i-1] {
				return bad("%s: boundaries must increase strictly; %v follows %v", b.name, b.v[i], b.v[i-1])
			}
		}
	}
	switch {
	case c.provider == nil:
		return bad("WithMeterProvider(nil): pass a provider, or leave the option out for the global one")
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
		switch {
		case sc.c == nil:
			return bad("WithStateCounter(%q, nil): pass a counter", sc.scope)
		case !c.scopeAttr && len(c.counters) > 1:
			return bad("%d state counters with WithScopeAttribute(false): their series would be the same; give one", len(c.counters))
		case seen[sc.scope]:
			return bad("WithStateCounter(%q) given twice: give one counter per scope", sc.scope)
		}
		seen[sc.scope] = true
	}
	return nil
}
