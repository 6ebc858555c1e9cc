package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/kafka"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/memory"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A classic-group dead letter carries the trace context of the record's last
// handler run: a permanent failure's one run, an exhausted record's second run
// (retried in place); an undecodable record's, made without a run, the record's
// own. A tracer whose Inject panics is logged once per copy at Error with its
// stack and writes nothing: every copy still goes, with its idemkit headers and
// the record's headers as they came, and the partition goes on past them.
func TestTraceDeadLettersCarryTheLastRun(t *testing.T) {
	for _, tc := range []struct {
		name   string
		panics bool
	}{{"tracer", false}, {"panicking tracer", true}} {
		t.Run(tc.name, func(t *testing.T) {
			brokers, _ := testenv.Kafka(t, 1, "payments", "payments.dlq")
			tr := &testenv.StampTracer{Panics: tc.panics}
			store, err := memory.NewStore(consumer.WithScope("payments"), consumer.WithMaxAttempts(2), consumer.WithObserver(tr))
			if err != nil {
				t.Fatal(err)
			}
			rec := func(key, value string) *kgo.Record {
				return &kgo.Record{Topic: "payments", Value: []byte(value), Headers: []kgo.RecordHeader{
					{Key: kafka.DefaultKeyHeader, Value: []byte(key)}, {Key: "traceparent", Value: []byte("tp-" + key)}}}
			}
			produceRaw(t, brokers, rec("refused", `{"id":"refused","amount":1}`), rec("flaky", `{"id":"flaky","amount":1}`),
				rec("garbled", "not json"), rec("fine", `{"id":"fine","amount":1}`))
			var mu sync.Mutex
			runs := map[string]int{}
			logs := &testenv.PanicLog{}
			c, err := kafka.NewTyped(store, groupOpts(brokers, "billing", "payments"), decodeEvent,
				func(_ context.Context, ev event, _ *kgo.Record) (int, error) {
					mu.Lock()
					runs[ev.ID]++
					mu.Unlock()
					switch ev.ID {
					case "refused":
						return 0, consumer.Permanent(errors.New("card declined"))
					case "flaky":
						return 0, errors.New("bank timed out")
					}
					return ev.Amount, nil
				}, kafka.WithBackoff(10*time.Millisecond, 50*time.Millisecond), kafka.WithLogger(slog.New(logs)))
			if err != nil {
				t.Fatal(err)
			}
			startMember(t, c)
			testenv.Eventually(t, 30*time.Second, "every offset committed", func() bool {
				l, _ := lag(t, brokers, "billing", "payments")
				return l == 0
			})
			dls := dlqRecords(t, brokers, "payments.dlq")
			mu.Lock()
			got := fmt.Sprint(runs)
			mu.Unlock()
			if len(dls) != 3 || got != "map[fine:1 flaky:2 refused:1]" {
				t.Fatalf("%d dead letters; runs %s; want 3; map[fine:1 flaky:2 refused:1]", len(dls), got)
			}
			want := map[string]struct{ kind, attempts, traceparent string }{
				"refused": {"PERMANENT", "1", "run-1-refused"},
				"flaky":   {"EXHAUSTED", "2", "run-2-flaky"},
				"garbled": {"UNDECODABLE", "0", "own:tp-garbled"},
			}
			for _, d := range dls {
				key := header(d, kafka.HeaderKey)
				w, ok := want[key]
				if !ok {
					t.Fatalf("a dead letter of key %q: %v", key, d.Headers)
				}
				delete(want, key)
				tp := w.traceparent
				if tc.panics {
					tp = "tp-" + key // the tracer wrote nothing: the record's header as it came
				}
				if got := header(d, "traceparent"); got != tp {
					t.Errorf("%s: dead letter's traceparent %q, want %q", key, got, tp)
				}
				if header(d, kafka.HeaderKind) != w.kind || header(d, kafka.HeaderAttempts) != w.attempts ||
					header(d, kafka.HeaderOriginalTopic) != "payments" {
					t.Errorf("%s: dead letter's headers %v, want kind %s after %s attempts", key, d.Headers, w.kind, w.attempts)
				}
			}
			logged := logs.Count()
			if wantLogged := map[bool]int{false: 0, true: 3}[tc.panics]; logged != wantLogged {
				t.Fatalf("%d panics logged at Error with a stack, want %d (one per copy)", logged, wantLogged)
			}
		})
	}
}
