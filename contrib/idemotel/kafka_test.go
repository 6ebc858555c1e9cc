package idemotel_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/kafka"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/contrib/idemotel"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// kafkaCounts counts a consumer's dead-letter copies and keeps the offset it last
// committed.
type kafkaCounts struct {
	dead      atomic.Int64
	committed atomic.Int64
	failed    atomic.Int64 // commits that failed
}

func (c *kafkaCounts) OnDeadLetter(consumer.DeadLetterEvent) { c.dead.Add(1) }
func (c *kafkaCounts) OnCommit(e consumer.CommitEvent) {
	if e.Err != nil {
		c.failed.Add(1)
		return
	}
	for {
		at := c.committed.Load()
		if e.Offset <= at || c.committed.CompareAndSwap(at, e.Offset) {
			return
		}
	}
}

// kafkaDeadLetters reads the n records of topic at brokers, by idemkit key, each
// key's in the order of their offsets.
func kafkaDeadLetters(t *testing.T, brokers []string, topic string, n int) map[string][]*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out := map[string][]*kgo.Record{}
	seen := 0
	for seen < n {
		f := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d dead letters", seen, n)
		}
		for _, r := range f.Records() {
			seen++
			k := kafkaHeader(r, kafka.HeaderKey)
			out[k] = append(out[k], r) // one partition: in offset order
		}
	}
	return out
}

func kafkaHeader(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// The Kafka consumer's dead letters carry the trace context of the execution
// that failed: an exhausted record's the span of its last run (its second), a
// permanent failure's the span of its one run; a record dead-lettered without a
// run of its own (undecodable, or a duplicate of a key that failed for good)
// carries the record's own trace context. A traceparent header that is no W3C
// traceparent (malformed text, bytes that are no text) costs nothing: every
// record gets its copy, with its idemkit headers, and every offset is committed.
func TestKafkaDeadLettersCarryTheFailingRunsSpan(t *testing.T) {
	brokers, _ := testenv.Kafka(t, 1, "payments", "payments.dlq")
	tr, exp, _ := newTracer(t)
	counts := &kafkaCounts{}
	store := memStore(t, consumer.WithScope("payments-svc"), consumer.WithMaxAttempts(2), consumer.WithObserver(tr, counts))
	var mu sync.Mutex
	runs := map[string][]trace.SpanContext{} // by key: each run's span
	decode := func(r *kgo.Record) (string, error) {
		if string(r.Value) != "payment" {
			return "", errors.New("not a payment")
		}
		return kafkaHeader(r, kafka.DefaultKeyHeader), nil
	}
	c, err := kafka.NewTyped(store, []kgo.Opt{
		kgo.SeedBrokers(brokers...), kgo.ConsumerGroup("payments-svc"), kgo.ConsumeTopics("payments"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100 * time.Millisecond),
	}, decode, func(ctx context.Context, id string, _ *kgo.Record) (int, error) {
		mu.Lock()
		runs[id] = append(runs[id], trace.SpanContextFromContext(ctx))
		mu.Unlock()
		if strings.HasPrefix(id, "refused-") {
			return 0, consumer.Permanent(errors.New("card refused"))
		}
		return 0, errors.New("bank timed out")
	}, kafka.WithOrdering(kafka.ByKey), kafka.WithBackoff(10*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_, ph := producer(9)
	cases := []struct {
		name        string
		traceparent []byte
	}{
		{"w3c", []byte(ph.Get("traceparent"))},
		{"malformed", []byte("not-a-traceparent")},
		{"binary", []byte{0xff, 0x00, 0xfe}},
	}
	rec := func(key, value string, tp []byte) *kgo.Record {
		return &kgo.Record{Topic: "payments", Key: []byte(key), Value: []byte(value), Headers: []kgo.RecordHeader{
			{Key: kafka.DefaultKeyHeader, Value: []byte(key)}, {Key: "traceparent", Value: tp}, {Key: "tenant", Value: []byte("acme")}}}
	}
	var recs []*kgo.Record
	for _, tc := range cases {
		refused := "refused-" + tc.name
		recs = append(recs, rec("poison-"+tc.name, "payment", tc.traceparent), rec(refused, "payment", tc.traceparent),
			rec("garbled-"+tc.name, "{not a payment", tc.traceparent), rec(refused, "payment", tc.traceparent))
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	n := int64(len(recs))
	testenv.Eventually(t, 30*time.Second, "every record dead-lettered and committed", func() bool {
		return counts.dead.Load() == n && counts.committed.Load() == n
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if counts.dead.Load() != n || counts.committed.Load() != n || counts.failed.Load() != 0 {
		t.Fatalf("%d dead letters, committed up to %d, %d failed commits; want %d, %d and 0",
			counts.dead.Load(), counts.committed.Load(), counts.failed.Load(), n, n)
	}
	spans := map[string][]tracetest.SpanStub{} // by key, in attempt order
	for _, s := range exp.GetSpans() {
		key := attrs(s)[idemotel.KeyKey]
		spans[key] = append(spans[key], s)
	}
	dups := 0 // the spans of the duplicates' executions, which ran no handler
	for k, ss := range spans {
		kept := ss[:0]
		for _, sp := range ss {
			if attrs(sp)[idemotel.OutcomeKey] == "duplicate" {
				dups++
				continue
			}
			kept = append(kept, sp)
		}
		spans[k] = kept
	}
	if got, want := len(exp.GetSpans()), 4*len(cases); got != want || dups != len(cases) {
		t.Fatalf("%d spans, %d of duplicates; want %d: two runs of each exhausted record, one of each refused key and one of its duplicate",
			got, dups, want)
	}
	dead := kafkaDeadLetters(t, brokers, "payments.dlq", int(n))
	if len(dead) != 3*len(cases) { // the refused key's two copies share a key
		t.Fatalf("dead letters of %d keys, want %d", len(dead), 3*len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			poison, refused, garbled := "poison-"+tc.name, "refused-"+tc.name, "garbled-"+tc.name
			mu.Lock()
			pr, rr, gr := runs[poison], runs[refused], runs[garbled]
			mu.Unlock()
			if len(pr) != 2 || len(rr) != 1 || len(gr) != 0 || len(spans[poison]) != 2 || len(spans[refused]) != 1 {
				t.Fatalf("runs: %s %d, %s %d, %s %d; spans %d and %d; want 2, 1, 0; 2 and 1",
					poison, len(pr), refused, len(rr), garbled, len(gr), len(spans[poison]), len(spans[refused]))
			}
			last := spans[poison][1].SpanContext
			if attrs(spans[poison][0])[idemotel.AttemptKey] == "2" {
				last = spans[poison][0].SpanContext
			}
			if !pr[1].Equal(last) {
				t.Fatalf("the last run ran under %v, want the recorded attempt 2 %v", pr[1], last)
			}
			for _, w := range []struct {
				key, kind, outcome, attempts, traceparent string
			}{
				{poison, "EXHAUSTED", "ERROR", "2", traceparent(last)},
				{garbled, "UNDECODABLE", "ERROR", "0", string(tc.traceparent)},
			} {
				if len(dead[w.key]) != 1 {
					t.Fatalf("%d dead letters of %s, want 1", len(dead[w.key]), w.key)
				}
				d := dead[w.key][0]
				if got := kafkaHeader(d, "traceparent"); got != w.traceparent {
					t.Errorf("%s: dead letter's traceparent %q, want %q", w.key, got, w.traceparent)
				}
				if kafkaHeader(d, kafka.HeaderKind) != w.kind || kafkaHeader(d, kafka.HeaderOutcome) != w.outcome ||
					kafkaHeader(d, kafka.HeaderAttempts) != w.attempts || kafkaHeader(d, "tenant") != "acme" ||
					kafkaHeader(d, kafka.HeaderOriginalTopic) != "payments" {
					t.Errorf("%s: dead letter's headers %v", w.key, d.Headers)
				}
			}
		})
	}
	// A refused key's copies: the first carries its run's span, the second (a
	// duplicate of a key that failed for good: no run) the record's own header.
	for _, tc := range cases {
		refused := "refused-" + tc.name
		cs := dead[refused]
		if len(cs) != 2 {
			t.Fatalf("%s: %d dead letters, want 2", refused, len(cs))
		}
		if got, want := kafkaHeader(cs[0], "traceparent"), traceparent(spans[refused][0].SpanContext); got != want ||
			kafkaHeader(cs[0], kafka.HeaderKind) != "PERMANENT" {
			t.Errorf("%s: first dead letter's traceparent %q and kind %q, want its run's %q and PERMANENT",
				refused, got, kafkaHeader(cs[0], kafka.HeaderKind), want)
		}
		if got := kafkaHeader(cs[1], "traceparent"); got != string(tc.traceparent) || kafkaHeader(cs[1], kafka.HeaderOutcome) != "DUPLICATE" {
			t.Errorf("%s: duplicate's dead letter's traceparent %q and outcome %q, want its own %q and DUPLICATE",
				refused, got, kafkaHeader(cs[1], kafka.HeaderOutcome), tc.traceparent)
		}
	}
}
