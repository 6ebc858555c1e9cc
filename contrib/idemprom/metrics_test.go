package idemprom_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/contrib/idemprom"
	"github.com/idemkit/idemkit/internal/observe"
	"github.com/idemkit/idemkit/store/memory"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

func newMetrics(t *testing.T, opts ...idemprom.Option) (*idemprom.Metrics, *prometheus.Registry) {
	t.Helper()
	m, err := idemprom.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// run is a set of real executions on store whose outcomes are known exactly: two
// batches (ten messages, one failing for good; five of them again), a retryable
// failure, a key found in progress, a payload conflict, and a pipeline (three new
// messages and a duplicate).
func run(t *testing.T, store consumer.Store) {
	t.Helper()
	ctx := context.Background()
	items := make([]consumer.BatchItem, 10)
	for i := range items {
		items[i] = consumer.BatchItem{Key: consumer.Key(fmt.Sprint("o-", i)), Payload: []byte("order")}
	}
	h := func(_ context.Context, i int, _ consumer.BatchItem) (int, error) {
		if i == 9 {
			return 0, consumer.Permanent(errors.New("card declined"))
		}
		return i, nil
	}
	expect(t, consumer.ExecuteBatch(ctx, store, items, h), "SUCCESS*9 ERROR")
	expect(t, consumer.ExecuteBatch(ctx, store, items[:5], h), "DUPLICATE*5")

	r := consumer.ExecuteIdempotently(ctx, store, "flaky", nil, func(context.Context) (int, error) {
		return 0, errors.New("connection reset by the payment gateway")
	})
	expect(t, []consumer.Result[int]{r}, "ERROR")

	var inner consumer.Result[int]
	r = consumer.ExecuteIdempotently(ctx, store, "busy", nil, func(ctx context.Context) (int, error) {
		inner = consumer.ExecuteIdempotently(ctx, store, "busy", nil, func(context.Context) (int, error) { return 2, nil })
		return 1, nil
	})
	expect(t, []consumer.Result[int]{r, inner}, "SUCCESS IN_PROGRESS")

	r = consumer.ExecuteIdempotently(ctx, store, "o-1", []byte("another order"), func(context.Context) (int, error) { return 0, nil })
	expect(t, []consumer.Result[int]{r}, "ERROR")

	p, err := consumer.NewPipeline[int](ctx, store, consumer.WithSource("replay"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var got []consumer.Result[int]
	for _, k := range []string{"p-0", "p-1", "p-2", "o-0"} {
		wg.Add(1)
		err := p.Submit(ctx, consumer.PipelineItem[int]{Key: consumer.Key(k), Payload: []byte("order"),
			Run: func(context.Context) (int, error) { return 7, nil },
			Done: func(r consumer.Result[int]) {
				mu.Lock()
				got = append(got, r)
				mu.Unlock()
				wg.Done()
			}})
		if err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	expectCount(t, got, map[consumer.Outcome]int{consumer.Success: 3, consumer.Duplicate: 1})
}

// expect checks outcomes in order, written as "SUCCESS*9 ERROR".
func expect(t *testing.T, rs []consumer.Result[int], want string) {
	t.Helper()
	var got []string
	for _, r := range rs {
		got = append(got, r.Outcome.String())
	}
	var w []string
	for _, f := range strings.Fields(want) {
		name, n := f, 1
		if i := strings.Index(f, "*"); i > 0 {
			name = f[:i]
			fmt.Sscan(f[i+1:], &n)
		}
		for ; n > 0; n-- {
			w = append(w, name)
		}
	}
	if strings.Join(got, " ") != strings.Join(w, " ") {
		t.Fatalf("outcomes %v, want %v", got, w)
	}
}

func expectCount(t *testing.T, rs []consumer.Result[int], want map[consumer.Outcome]int) {
	t.Helper()
	got := map[consumer.Outcome]int{}
	for _, r := range rs {
		got[r.Outcome]++
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
}

// The counters after a real run on Redis match its outcomes exactly.
func TestCountsMatchARealRun(t *testing.T) {
	m, reg := newMetrics(t)
	store := redisStore(t, consumer.WithScope("orders"), consumer.WithObserver(m))
	run(t, store)

	want := `
# HELP idemkit_outcomes_total Messages by the outcome of their execution.
# TYPE idemkit_outcomes_total counter
idemkit_outcomes_total{action="dead_letter",kind="conflict",outcome="error",scope="orders",source="execute"} 1
idemkit_outcomes_total{action="dead_letter",kind="permanent",outcome="error",scope="orders",source="execute"} 1
idemkit_outcomes_total{action="retry",kind="handler",outcome="error",scope="orders",source="execute"} 1
idemkit_outcomes_total{action="ack",kind="none",outcome="duplicate",scope="orders",source="execute"} 5
idemkit_outcomes_total{action="ack",kind="none",outcome="duplicate",scope="orders",source="replay"} 1
idemkit_outcomes_total{action="ack",kind="none",outcome="success",scope="orders",source="execute"} 10
idemkit_outcomes_total{action="ack",kind="none",outcome="success",scope="orders",source="replay"} 3
idemkit_outcomes_total{action="wait",kind="none",outcome="in_progress",scope="orders",source="execute"} 1
# HELP idemkit_claim_answers_total What claims found: claimed, duplicate, in_progress (another owner at work), conflict, error.
# TYPE idemkit_claim_answers_total counter
idemkit_claim_answers_total{answer="claimed",scope="orders"} 15
idemkit_claim_answers_total{answer="conflict",scope="orders"} 1
idemkit_claim_answers_total{answer="duplicate",scope="orders"} 6
idemkit_claim_answers_total{answer="error",scope="orders"} 0
idemkit_claim_answers_total{answer="in_progress",scope="orders"} 1
# HELP idemkit_store_messages_total Messages the store calls carried.
# TYPE idemkit_store_messages_total counter
idemkit_store_messages_total{op="claim",scope="orders"} 23
idemkit_store_messages_total{op="settle",scope="orders"} 15
# HELP idemkit_handlers_running Handlers running now.
# TYPE idemkit_handlers_running gauge
idemkit_handlers_running{scope="orders"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "idemkit_outcomes_total",
		"idemkit_claim_answers_total", "idemkit_store_messages_total", "idemkit_handlers_running"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   uint64
	}{
		{"idemkit_handler_duration_seconds", map[string]string{"scope": "orders", "kind": "none"}, 13},
		{"idemkit_handler_duration_seconds", map[string]string{"scope": "orders", "kind": "permanent"}, 1},
		{"idemkit_handler_duration_seconds", map[string]string{"scope": "orders", "kind": "handler"}, 1},
		// ExecuteBatch and ExecuteIdempotently claim once per call: 2 batches and 4 single calls.
		// The pipeline's four messages may take one claim call or several.
		{"idemkit_store_latency_seconds", map[string]string{"scope": "orders", "op": "claim"}, 6},
	} {
		got := histogramCount(t, reg, c.name, c.labels)
		if c.labels["op"] == "claim" {
			if got < c.want+1 || got > c.want+4 {
				t.Errorf("%s%v: %d observations, want %d to %d", c.name, c.labels, got, c.want+1, c.want+4)
			}
			continue
		}
		if got != c.want {
			t.Errorf("%s%v: %d observations, want %d", c.name, c.labels, got, c.want)
		}
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
}

// Events the adapters report (retries, dead letters, commits, acks) are counted.
func TestAdapterEvents(t *testing.T) {
	m, reg := newMetrics(t)
	store, err := memory.NewStore(consumer.WithScope("payments"), consumer.WithObserver(m))
	if err != nil {
		t.Fatal(err)
	}
	s := store.Settings()
	for i := 0; i < 3; i++ {
		observe.Each(s.Observers, func(h consumer.RetryHook) {
			h.OnRetry(consumer.RetryEvent{Source: "kafka", Scope: s.Scope, Key: "k", Attempt: i + 1, Kind: consumer.KindHandler})
		})
	}
	observe.Each(s.Observers, func(h consumer.DeadLetterHook) {
		h.OnDeadLetter(consumer.DeadLetterEvent{Source: "kafka", Scope: s.Scope, Key: "k", Kind: consumer.KindExhausted, Destination: "payments.dlq"})
		h.OnDeadLetter(consumer.DeadLetterEvent{Source: "amqp", Scope: s.Scope, Key: "j", Kind: consumer.KindPermanent, BodyLess: true})
	})
	observe.Each(s.Observers, func(h consumer.CommitHook) {
		h.OnCommit(consumer.CommitEvent{Source: "kafka", Origin: consumer.Origin{Topic: "payments", Partition: 3, Offset: 100}, Lag: 42})
		h.OnCommit(consumer.CommitEvent{Source: "kafka", Origin: consumer.Origin{Topic: "payments", Partition: 3, Offset: 120}, Lag: 22})
		h.OnCommit(consumer.CommitEvent{Source: "kafka", Origin: consumer.Origin{Topic: "payments", Partition: 4, Offset: 7}, Lag: -1})
		// A failed commit is neither counted nor a lag.
		h.OnCommit(consumer.CommitEvent{Source: "kafka", Origin: consumer.Origin{Topic: "payments", Partition: 3, Offset: 140}, Lag: -1,
			Err: errors.New("REBALANCE_IN_PROGRESS")})
	})
	observe.Each(s.Observers, func(h consumer.AckHook) {
		h.OnAck(consumer.AckEvent{Source: "amqp", Origin: consumer.Origin{Queue: "orders", DeliveryTag: 1}, Messages: 1})
		h.OnAck(consumer.AckEvent{Source: "amqp", Origin: consumer.Origin{Queue: "orders", DeliveryTag: 26}, Messages: 25})
	})
	want := `
# HELP idemkit_retries_total Retries adapters scheduled.
# TYPE idemkit_retries_total counter
idemkit_retries_total{kind="handler",scope="payments",source="kafka"} 3
# HELP idemkit_dead_letters_total Dead-letter copies the broker confirmed.
# TYPE idemkit_dead_letters_total counter
idemkit_dead_letters_total{kind="exhausted",scope="payments",source="kafka"} 1
idemkit_dead_letters_total{kind="permanent",scope="payments",source="amqp"} 1
# HELP idemkit_dead_letters_bodyless_total Dead-letter copies sent without their body (the broker refused the full copy).
# TYPE idemkit_dead_letters_bodyless_total counter
idemkit_dead_letters_bodyless_total{scope="payments",source="amqp"} 1
# HELP idemkit_commits_total Offsets committed.
# TYPE idemkit_commits_total counter
idemkit_commits_total{source="kafka",topic="payments"} 3
# HELP idemkit_kafka_commit_lag Records between the last committed offset and the partition's high watermark, at the last commit.
# TYPE idemkit_kafka_commit_lag gauge
idemkit_kafka_commit_lag{partition="3",topic="payments"} 22
# HELP idemkit_acks_total Acknowledgements sent.
# TYPE idemkit_acks_total counter
idemkit_acks_total{queue="orders",source="amqp"} 2
# HELP idemkit_acked_messages_total Deliveries acknowledgements settled.
# TYPE idemkit_acked_messages_total counter
idemkit_acked_messages_total{queue="orders",source="amqp"} 26
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "idemkit_retries_total", "idemkit_dead_letters_total",
		"idemkit_dead_letters_bodyless_total", "idemkit_commits_total", "idemkit_kafka_commit_lag",
		"idemkit_acks_total", "idemkit_acked_messages_total"); err != nil {
		t.Fatal(err)
	}
}

// A lease that cannot be renewed is counted lost once, and its renewal calls are
// observed.
func TestLeaseLost(t *testing.T) {
	m, reg := newMetrics(t)
	base := redisStore(t, consumer.WithScope("jobs"), consumer.WithLease(150*time.Millisecond), consumer.WithObserver(m))
	r := consumer.ExecuteIdempotently(context.Background(), &failingExtend{base}, "long-job", nil, func(ctx context.Context) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	})
	if !errors.Is(r.Err, consumer.ErrLeaseLost) {
		t.Fatalf("%v %v, want a lost lease", r.Outcome, r.Err)
	}
	want := `
# HELP idemkit_leases_lost_total Attempts stopped because their lease was lost.
# TYPE idemkit_leases_lost_total counter
idemkit_leases_lost_total{scope="jobs"} 1
# HELP idemkit_outcomes_total Messages by the outcome of their execution.
# TYPE idemkit_outcomes_total counter
idemkit_outcomes_total{action="retry",kind="lease_lost",outcome="error",scope="jobs",source="execute"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "idemkit_leases_lost_total", "idemkit_outcomes_total"); err != nil {
		t.Fatal(err)
	}
	if n := histogramCount(t, reg, "idemkit_store_latency_seconds", map[string]string{"scope": "jobs", "op": "renew"}); n < 1 {
		t.Fatalf("%d renewal calls observed, want at least 1", n)
	}
}

// failingExtend is a real store whose renewals fail as if it were unreachable.
type failingExtend struct{ consumer.Store }

func (f *failingExtend) Extend(_ context.Context, items []consumer.Owned) []error {
	out := make([]error, len(items))
	for i := range out {
		out[i] = &consumer.StoreError{Op: "extend", Err: errors.New("connection refused")}
	}
	return out
}

// Without the scope and kind labels, every scope and kind shares a series.
func TestDroppedLabels(t *testing.T) {
	m, reg := newMetrics(t, idemprom.WithScopeLabel(false), idemprom.WithKindLabel(false), idemprom.WithNamespace("svc"))
	for _, scope := range []string{"a", "b"} {
		store, err := memory.NewStore(consumer.WithScope(scope), consumer.WithObserver(m))
		if err != nil {
			t.Fatal(err)
		}
		consumer.ExecuteIdempotently(context.Background(), store, "k1", nil, func(context.Context) (int, error) { return 1, nil })
		consumer.ExecuteIdempotently(context.Background(), store, "k2", nil, func(context.Context) (int, error) {
			return 0, consumer.Permanent(errors.New("no"))
		})
	}
	want := `
# HELP svc_outcomes_total Messages by the outcome of their execution.
# TYPE svc_outcomes_total counter
svc_outcomes_total{action="dead_letter",outcome="error",source="execute"} 2
svc_outcomes_total{action="ack",outcome="success",source="execute"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "svc_outcomes_total"); err != nil {
		t.Fatal(err)
	}
	if n := histogramCount(t, reg, "svc_handler_duration_seconds", map[string]string{}); n != 4 {
		t.Fatalf("handler durations %d, want 4 in one series", n)
	}
}

// WithNativeHistograms exposes native buckets beside the classic ones.
func TestNativeHistograms(t *testing.T) {
	m, reg := newMetrics(t, idemprom.WithNativeHistograms(true))
	store, err := memory.NewStore(consumer.WithScope("n"), consumer.WithObserver(m))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		consumer.ExecuteIdempotently(context.Background(), store, consumer.Key(fmt.Sprint("k", i)), nil,
			func(context.Context) (int, error) { time.Sleep(time.Millisecond); return 1, nil })
	}
	h := histogram(t, reg, "idemkit_handler_duration_seconds", map[string]string{"scope": "n", "kind": "none"})
	if h.GetSampleCount() != 5 || h.Schema == nil || len(h.GetPositiveSpan()) == 0 || len(h.GetBucket()) == 0 {
		t.Fatalf("want native (schema, spans) and classic buckets with 5 observations, got %v", h)
	}
}

// A bad option is refused with an error that names it.
func TestBadOptions(t *testing.T) {
	for _, c := range []struct {
		opt  idemprom.Option
		want string
	}{
		{idemprom.WithHandlerBuckets(nil), "WithHandlerBuckets"},
		{idemprom.WithStoreBuckets([]float64{1, 1}), "increase strictly"},
		{idemprom.WithLagSeries(0), "WithLagSeries(0)"},
		{idemprom.WithLagExpiry(0), "WithLagExpiry"},
		{idemprom.WithRecordTimeout(-time.Second), "WithRecordTimeout"},
		{idemprom.WithRecordInterval(-time.Second), "WithRecordInterval"},
		{idemprom.WithStateCounter("x", nil), "WithStateCounter"},
		{idemprom.WithLogger(nil), "WithLogger"},
		{idemprom.WithConstLabels(prometheus.Labels{"scope": "x"}), "own labels"},
		{nil, "nil option"},
	} {
		_, err := idemprom.New(c.opt)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%v): %v, want an error saying %q", c.want, err, c.want)
		}
	}
	f := idemprom.StateCounterFunc(func(context.Context) (map[string]int64, bool, error) { return nil, false, nil })
	if _, err := idemprom.New(idemprom.WithStateCounter("a", f), idemprom.WithStateCounter("a", f)); err == nil {
		t.Error("two counters for one scope: no error")
	}
}

func histogram(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) *dto.Histogram {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue next
				}
			}
			return m.GetHistogram()
		}
	}
	return &dto.Histogram{}
}

func histogramCount(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) uint64 {
	return histogram(t, reg, name, labels).GetSampleCount()
}
