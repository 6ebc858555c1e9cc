package kafkashare_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/kafkashare"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/memory"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A share-group dead letter carries the trace context of the record's last
// handler run: a permanent failure's one run, an exhausted record's second run
// (on its second delivery); an undecodable record's, made without a run, the
// record's own. A tracer whose Inject panics is logged once per copy at Error
// with its stack and writes nothing: every copy still goes, with its idemkit
// headers and the record's headers as they came.
func TestTraceDeadLettersCarryTheLastRun(t *testing.T) {
	for _, tc := range []struct {
		name   string
		panics bool
	}{{"tracer", false}, {"panicking tracer", true}} {
		t.Run(tc.name, func(t *testing.T) {
			brokers := shareCluster(t, 1, "payments", "payments.dlq")
			startAtEarliest(t, brokers, "billing")
			tr := &testenv.StampTracer{Panics: tc.panics}
			acts := newActions()
			store, err := memory.NewStore(consumer.WithScope("payments"), consumer.WithMaxAttempts(2), consumer.WithObserver(tr, acts))
			if err != nil {
				t.Fatal(err)
			}
			rec := func(key, value string) *kgo.Record {
				return &kgo.Record{Topic: "payments", Value: []byte(value), Headers: []kgo.RecordHeader{
					{Key: kafkashare.DefaultKeyHeader, Value: []byte(key)}, {Key: "traceparent", Value: []byte("tp-" + key)}}}
			}
			produceRaw(t, brokers, rec("refused", `{"id":"refused","amount":1}`), rec("flaky", `{"id":"flaky","amount":1}`),
				rec("garbled", "not json"))
			var mu sync.Mutex
			runs := map[string]int{}
			logs := &testenv.PanicLog{}
			c, err := kafkashare.NewTyped(store, shareOpts(brokers, "billing", "payments"), decodeEvent,
				func(_ context.Context, ev event, _ *kgo.Record) (int, error) {
					mu.Lock()
					runs[ev.ID]++
					mu.Unlock()
					if ev.ID == "refused" {
						return 0, consumer.Permanent(errors.New("card declined"))
					}
					return 0, errors.New("bank timed out")
				}, kafkashare.WithBackoff(10*time.Millisecond, 50*time.Millisecond), kafkashare.WithLogger(slog.New(logs)))
			if err != nil {
				t.Fatal(err)
			}
			run(t, c)
			testenv.Eventually(t, 60*time.Second, "every record dead-lettered and acknowledged", func() bool {
				return acts.get("accept/dead-lettered") == 3 && unfinished(t, brokers, "billing", "payments", 1) == 0
			})
			dls := deadLetters(t, brokers, "payments.dlq", 3)
			mu.Lock()
			refusedRuns, flakyRuns, garbledRuns := runs["refused"], runs["flaky"], runs["garbled"]
			mu.Unlock()
			if len(dls) != 3 || refusedRuns != 1 || flakyRuns != 2 || garbledRuns != 0 ||
				acts.get("accept/dead-lettered") != 3 || acts.get("release/retry") != 1 {
				t.Fatalf("%d dead letters; runs: refused %d, flaky %d, garbled %d; %d accepted dead-lettered, %d released to retry; want 3; 1, 2, 0; 3, 1",
					len(dls), refusedRuns, flakyRuns, garbledRuns, acts.get("accept/dead-lettered"), acts.get("release/retry"))
			}
			want := map[string]struct{ kind, attempts, traceparent string }{
				"refused": {"PERMANENT", "1", "run-1-refused"},
				"flaky":   {"EXHAUSTED", "2", "run-2-flaky"},
				"garbled": {"UNDECODABLE", "0", "own:tp-garbled"},
			}
			for _, d := range dls {
				key := header(d, kafkashare.DefaultKeyHeader) // the record's own, copied (an undecodable record has no idemkit key)
				w, ok := want[key]
				if !ok {
					t.Fatalf("a dead letter of key %q: %v", key, d.Headers)
				}
				tp := w.traceparent
				if tc.panics {
					tp = "tp-" + key // the tracer wrote nothing: the record's header as it came
				}
				if got := header(d, "traceparent"); got != tp {
					t.Errorf("%s: dead letter's traceparent %q, want %q", key, got, tp)
				}
				if header(d, kafkashare.HeaderKind) != w.kind || header(d, kafkashare.HeaderAttempts) != w.attempts ||
					header(d, kafkashare.HeaderOriginalTopic) != "payments" {
					t.Errorf("%s: dead letter's headers %v, want kind %s after %s attempts", key, d.Headers, w.kind, w.attempts)
				}
			}
			if got := tr.Stamps("flaky"); len(got) != 2 {
				t.Fatalf("flaky's runs stamped %v, want two", got)
			}
			logged := logs.Count()
			if wantLogged := map[bool]int{false: 0, true: 3}[tc.panics]; logged != wantLogged {
				t.Fatalf("%d panics logged at Error with a stack, want %d (one per copy)", logged, wantLogged)
			}
		})
	}
}
