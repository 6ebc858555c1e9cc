package idemotel_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/contrib/idemotel"
	"github.com/idemkit/idemkit/internal/observe"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func newMeter(t *testing.T, opts ...idemotel.MeterOption) (*idemotel.Meter, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := idemotel.NewMeter(append([]idemotel.MeterOption{idemotel.WithMeterProvider(mp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return m, reader
}

// collected is one collection: for each instrument, each series' value (the sum,
// the gauge's value, or the histogram's count) by its attributes, written
// "k=v,k=v" in key order.
type collected map[string]map[string]float64

func collect(t *testing.T, r *sdkmetric.ManualReader) collected {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := collected{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			series := map[string]float64{}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					series[attrString(p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					series[attrString(p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					series[attrString(p.Attributes)] = p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					series[attrString(p.Attributes)] = float64(p.Count)
				}
			}
			out[m.Name] = series
		}
	}
	return out
}

func attrString(s attribute.Set) string {
	var parts []string
	for _, kv := range s.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+kv.Value.String())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func (c collected) expect(t *testing.T, name string, want map[string]float64) {
	t.Helper()
	if fmt.Sprint(c[name]) != fmt.Sprint(want) {
		t.Errorf("%s:\n got %v\nwant %v", name, c[name], want)
	}
}

// The instruments after a run of real executions match its outcomes exactly.
func TestMeterCountsARun(t *testing.T) {
	m, reader := newMeter(t)
	store := memStore(t, consumer.WithScope("orders"), consumer.WithObserver(m))
	ctx := context.Background()
	items := make([]consumer.BatchItem, 10)
	for i := range items {
		items[i] = consumer.BatchItem{Key: consumer.Key(fmt.Sprint("o-", i)), Payload: []byte("order")}
	}
	h := func(_ context.Context, i int, _ consumer.BatchItem) (int, error) {
		if i == 9 {
			return 0, consumer.Permanent(errors.New("declined"))
		}
		return i, nil
	}
	consumer.ExecuteBatch(ctx, store, items, h)
	consumer.ExecuteBatch(ctx, store, items[:5], h)
	consumer.ExecuteIdempotently(ctx, store, "flaky", nil, func(context.Context) (int, error) { return 0, errors.New("reset") })
	consumer.ExecuteIdempotently(ctx, store, "busy", nil, func(ctx context.Context) (int, error) {
		consumer.ExecuteIdempotently(ctx, store, "busy", nil, func(context.Context) (int, error) { return 2, nil })
		return 1, nil
	})
	consumer.ExecuteIdempotently(ctx, store, "o-1", []byte("another order"), func(context.Context) (int, error) { return 0, nil })
	p, err := consumer.NewPipeline[int](ctx, store, consumer.WithSource("replay"))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, k := range []string{"p-0", "p-1", "p-2", "o-0"} {
		wg.Add(1)
		_ = p.Submit(ctx, consumer.PipelineItem[int]{Key: consumer.Key(k), Payload: []byte("order"),
			Run: func(context.Context) (int, error) { return 7, nil }, Done: func(consumer.Result[int]) { wg.Done() }})
	}
	wg.Wait()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	c := collect(t, reader)
	c.expect(t, "idemkit.outcomes", map[string]float64{
		"action=dead_letter,kind=conflict,outcome=error,scope=orders,source=execute":  1,
		"action=dead_letter,kind=permanent,outcome=error,scope=orders,source=execute": 1,
		"action=retry,kind=handler,outcome=error,scope=orders,source=execute":         1,
		"action=ack,kind=none,outcome=duplicate,scope=orders,source=execute":          5,
		"action=ack,kind=none,outcome=duplicate,scope=orders,source=replay":           1,
		"action=ack,kind=none,outcome=success,scope=orders,source=execute":            10,
		"action=ack,kind=none,outcome=success,scope=orders,source=replay":             3,
		"action=wait,kind=none,outcome=in_progress,scope=orders,source=execute":       1,
	})
	c.expect(t, "idemkit.claim.answers", map[string]float64{
		"answer=claimed,scope=orders": 15, "answer=conflict,scope=orders": 1,
		"answer=duplicate,scope=orders": 6, "answer=in_progress,scope=orders": 1, "answer=error,scope=orders": 0,
	})
	c.expect(t, "idemkit.handler.duration", map[string]float64{
		"kind=handler,scope=orders": 1, "kind=none,scope=orders": 13, "kind=permanent,scope=orders": 1,
	})
	c.expect(t, "idemkit.handlers.running", map[string]float64{"scope=orders": 0})
	c.expect(t, "idemkit.store.messages", map[string]float64{"op=claim,scope=orders": 23, "op=settle,scope=orders": 15})
}

// Events the adapters report are counted; the commit lag is bounded and expires.
func TestMeterAdapterEvents(t *testing.T) {
	m, reader := newMeter(t, idemotel.WithLagSeries(2), idemotel.WithLagExpiry(time.Hour))
	store := memStore(t, consumer.WithScope("payments"), consumer.WithObserver(m))
	s := store.Settings()
	observe.Each(s.Observers, func(h consumer.RetryHook) {
		h.OnRetry(consumer.RetryEvent{Source: "amqp", Scope: s.Scope, Kind: consumer.KindStoreUnavailable})
	})
	observe.Each(s.Observers, func(h consumer.DeadLetterHook) {
		h.OnDeadLetter(consumer.DeadLetterEvent{Source: "kafka", Scope: s.Scope, Kind: consumer.KindExhausted})
		h.OnDeadLetter(consumer.DeadLetterEvent{Source: "kafka", Scope: s.Scope, Kind: consumer.KindExhausted, BodyLess: true})
	})
	observe.Each(s.Observers, func(h consumer.CommitHook) {
		for p := int32(0); p < 3; p++ {
			h.OnCommit(consumer.CommitEvent{Source: "kafka", Origin: consumer.Origin{Topic: "payments", Partition: p}, Lag: int64(10 + p)})
		}
		// A failed commit is neither counted nor a lag.
		h.OnCommit(consumer.CommitEvent{Source: "kafka", Origin: consumer.Origin{Topic: "payments", Partition: 2}, Lag: -1,
			Err: errors.New("REBALANCE_IN_PROGRESS")})
	})
	observe.Each(s.Observers, func(h consumer.AckHook) {
		h.OnAck(consumer.AckEvent{Source: "amqp", Origin: consumer.Origin{Queue: "q"}, Messages: 5})
	})
	c := collect(t, reader)
	c.expect(t, "idemkit.retries", map[string]float64{"kind=store_unavailable,scope=payments,source=amqp": 1})
	c.expect(t, "idemkit.dead_letters", map[string]float64{"kind=exhausted,scope=payments,source=kafka": 2})
	c.expect(t, "idemkit.dead_letters.bodyless", map[string]float64{"scope=payments,source=kafka": 1})
	c.expect(t, "idemkit.commits", map[string]float64{"source=kafka,topic=payments": 3})
	if n := len(c["idemkit.kafka.commit.lag"]); n != 2 {
		t.Errorf("commit lag: %d series, want 2 (WithLagSeries)", n)
	}
	if c["idemkit.kafka.commit.lag"]["partition=2,topic=payments"] != 12 {
		t.Errorf("commit lag: %v, want partition 2 at 12", c["idemkit.kafka.commit.lag"])
	}
	c.expect(t, "idemkit.acks", map[string]float64{"queue=q,source=amqp": 1})
	c.expect(t, "idemkit.acked_messages", map[string]float64{"queue=q,source=amqp": 5})
}

// Dropping the scope and kind attributes merges their series.
func TestMeterDroppedAttributes(t *testing.T) {
	m, reader := newMeter(t, idemotel.WithScopeAttribute(false), idemotel.WithKindAttribute(false))
	for _, scope := range []string{"a", "b"} {
		store := memStore(t, consumer.WithScope(scope), consumer.WithObserver(m))
		consumer.ExecuteIdempotently(context.Background(), store, "k", nil, func(context.Context) (int, error) {
			return 0, consumer.Permanent(errors.New("no"))
		})
	}
	collect(t, reader).expect(t, "idemkit.outcomes", map[string]float64{"action=dead_letter,outcome=error,source=execute": 2})
}

type fakeCounter struct {
	mu    sync.Mutex
	calls int
	err   error
}

func (f *fakeCounter) CountByState(context.Context) (map[string]int64, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return nil, false, f.err
	}
	return map[string]int64{"completed": 90, "failed": 1}, true, nil
}

// Record counts are observed from a StateCounter (a fake: no store on this branch
// counts records by state yet), at most once per interval; a failed count is
// counted and observes nothing.
func TestMeterRecords(t *testing.T) {
	good, failing := &fakeCounter{}, &fakeCounter{err: errors.New("refused")}
	_, reader := newMeter(t, idemotel.WithStateCounter("a", good), idemotel.WithStateCounter("b", failing),
		idemotel.WithRecordInterval(time.Hour))
	var c collected
	for i := 0; i < 3; i++ {
		c = collect(t, reader)
	}
	c.expect(t, "idemkit.records", map[string]float64{"scope=a,state=completed": 90, "scope=a,state=failed": 1})
	c.expect(t, "idemkit.records.sampled", map[string]float64{"scope=a": 1})
	c.expect(t, "idemkit.record_count.errors", map[string]float64{"scope=b": 1})
	if good.calls != 1 || failing.calls != 1 {
		t.Fatalf("counts %d and %d for 3 collections within the interval, want 1 each", good.calls, failing.calls)
	}
}

func TestBadMeterOptions(t *testing.T) {
	for _, c := range []struct {
		opt  idemotel.MeterOption
		want string
	}{
		{idemotel.WithMeterProvider(nil), "WithMeterProvider(nil)"},
		{idemotel.WithHandlerBoundaries([]float64{2, 1}), "increase strictly"},
		{idemotel.WithStoreBoundaries(nil), "WithStoreBoundaries"},
		{idemotel.WithLagSeries(-1), "WithLagSeries(-1)"},
		{idemotel.WithLagExpiry(0), "WithLagExpiry"},
		{idemotel.WithRecordTimeout(0), "WithRecordTimeout"},
		{idemotel.WithStateCounter("s", nil), "WithStateCounter"},
		{idemotel.WithLogger(nil), "WithLogger"},
		{nil, "nil meter option"},
	} {
		if _, err := idemotel.NewMeter(c.opt); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewMeter: %v, want an error saying %q", err, c.want)
		}
	}
}
