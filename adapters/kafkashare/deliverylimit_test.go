package kafkashare_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/kafkashare"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/twmb/franz-go/pkg/kgo"
)

const nearLimitMsg = "kafkashare: record near its delivery limit; at the limit the broker archives it"

// A record whose handler fails retryably cycles through the broker towards the
// group's delivery limit (5). What the package promises about it, case by case:
// every delivery at the limit or one below is logged as a warning and reported to
// DeliveryLimitHook (with the record's key, coordinates, count and the limit),
// no other is; a retryable failure on the last delivery is dead-lettered
// (DELIVERY_LIMIT) and accepted, its copy written before the broker sees the
// ACCEPT, never released for the broker to archive uncopied; WithBrokerDeadLetter
// rejects it instead; a store whose max attempts are below the limit exhausts
// the key first (EXHAUSTED, on the delivery of its last attempt); a handler that succeeds on the next-to-last
// delivery is accepted with no dead letter. A second record that succeeds at once
// is never warned about. Counts are read at the broker: kfake may count a
// delivery the client never handed over, so the runs are derived from what the
// broker saw released, not assumed to be 5.
func TestNearDeliveryLimit(t *testing.T) {
	cases := []struct {
		name        string
		maxAttempts int
		brokerDLQ   bool
		succeedFrom int32 // the delivery count from which the handler succeeds; 0 never
		wantKind    string
		wantLast    kgo.AckStatus // the broker's last acknowledgement of the failing record
	}{
		{name: "fails to the last delivery", maxAttempts: 10, wantKind: kafkashare.KindDeliveryLimit, wantLast: kgo.AckAccept},
		{name: "fails to the last delivery, broker dead letter", maxAttempts: 10, brokerDLQ: true, wantLast: kgo.AckReject},
		{name: "store attempts below the limit", maxAttempts: 3, wantKind: "EXHAUSTED", wantLast: kgo.AckAccept},
		{name: "succeeds on the next-to-last delivery", maxAttempts: 10, succeedFrom: 4, wantLast: kgo.AckAccept},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			brokers, cluster := shareKfake(t, 1, "payments", "payments.dlq")
			startAtEarliest(t, brokers, "billing")
			prefix := testenv.Prefix(t)
			acts := newActions()
			store, err := redisstore.NewStore(testenv.Redis(t), consumer.WithPrefix(prefix), consumer.WithScope("payments"),
				consumer.WithLease(time.Second), consumer.WithMaxAttempts(tc.maxAttempts), consumer.WithObserver(acts))
			if err != nil {
				t.Fatal(err)
			}
			produceRaw(t, brokers,
				&kgo.Record{Topic: "payments", Value: []byte(`{"id":"flaky","amount":1}`),
					Headers: []kgo.RecordHeader{{Key: kafkashare.DefaultKeyHeader, Value: []byte("flaky")}}},
				&kgo.Record{Topic: "payments", Value: []byte(`{"id":"fine","amount":2}`),
					Headers: []kgo.RecordHeader{{Key: kafkashare.DefaultKeyHeader, Value: []byte("fine")}}})
			seen := watchBroker(cluster)
			logs := &logCapture{}
			var runs, fine atomic.Int64
			clientOpts := append(shareOpts(brokers, "billing", "payments"), kgo.ProducerBatchCompression(kgo.NoCompression()))
			opts := []kafkashare.Option{kafkashare.WithBackoff(10*time.Millisecond, 20*time.Millisecond),
				kafkashare.WithDeliveryLimit(5), kafkashare.WithLogger(slog.New(logs))}
			if tc.brokerDLQ {
				opts = append(opts, kafkashare.WithBrokerDeadLetter())
			}
			c, err := kafkashare.NewTyped(store, clientOpts, decodeEvent,
				func(ctx context.Context, ev event, _ *kgo.Record) (int, error) {
					if ev.ID == "fine" {
						fine.Add(1)
						return 2, nil
					}
					runs.Add(1)
					if n, _ := kafkashare.DeliveryCount(ctx); tc.succeedFrom > 0 && n >= tc.succeedFrom {
						return 1, nil
					}
					return 0, errors.New("provider timeout")
				}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			run(t, c)
			testenv.Eventually(t, 60*time.Second, "both records finished", func() bool {
				return unfinished(t, brokers, "billing", "payments", 1) == 0
			})

			// At the broker: the fine record accepted once; the failing one released
			// after each failing run but the last, then given wantLast.
			if got := seen.statuses(1); !slices.Equal(got, []kgo.AckStatus{kgo.AckAccept}) {
				t.Fatalf("the broker saw %v for the fine record, want one ACCEPT", got)
			}
			got := seen.statuses(0)
			if len(got) == 0 || got[len(got)-1] != tc.wantLast {
				t.Fatalf("the broker saw %v for the failing record, want RELEASEs then %v", got, tc.wantLast)
			}
			releases := len(got) - 1
			for _, s := range got[:releases] {
				if s != kgo.AckRelease {
					t.Fatalf("the broker saw %v for the failing record, want RELEASEs then %v", got, tc.wantLast)
				}
			}
			acts.mu.Lock()
			defer acts.mu.Unlock()
			last := acts.terminal[len(acts.terminal)-1]
			for _, e := range acts.terminal {
				if e.Offset == 0 {
					last = e
				}
			}

			// The runs: one per release, plus the last delivery's unless the store
			// exhausted the key before it ran.
			wantRuns := int64(releases + 1)
			if tc.wantKind == "EXHAUSTED" {
				wantRuns = int64(tc.maxAttempts)
			}
			if runs.Load() != wantRuns || runs.Load() > 5 || fine.Load() != 1 {
				t.Fatalf("failing record: %d runs, %d releases; fine record: %d runs; want %d (at most 5) and 1 (acknowledgements %v)",
					runs.Load(), releases, fine.Load(), wantRuns, acts.byReason)
			}
			// The last attempt's failure exhausts the key: dead-lettered on that
			// delivery, far from the broker's limit.
			if tc.wantKind == "EXHAUSTED" && releases != tc.maxAttempts-1 {
				t.Fatalf("%d releases before the key exhausted, want %d", releases, tc.maxAttempts-1)
			}
			switch {
			case tc.wantKind == kafkashare.KindDeliveryLimit || tc.brokerDLQ:
				if last.DeliveryCount != 5 {
					t.Fatalf("the failing record was settled on delivery %d, want the last (5)", last.DeliveryCount)
				}
			case tc.succeedFrom > 0:
				if last.DeliveryCount < tc.succeedFrom || last.Reason != "success" {
					t.Fatalf("the failing record settled %q on delivery %d, want success from %d", last.Reason, last.DeliveryCount, tc.succeedFrom)
				}
			}
			// The engine's handler and outcome events carry the broker's delivery count.
			hc, oc := acts.handlerCounts, acts.outcomeCounts
			ranLast := tc.wantKind != "EXHAUSTED"
			if !slices.IsSorted(hc) || len(hc) != int(runs.Load()+fine.Load()) || (ranLast && hc[len(hc)-1] != last.DeliveryCount) ||
				!slices.IsSorted(oc) || oc[len(oc)-1] != last.DeliveryCount {
				t.Fatalf("handler events' delivery counts %v for %d runs, outcome events' %v; want one per run, rising, the last %d",
					hc, runs.Load()+fine.Load(), oc, last.DeliveryCount)
			}

			// The dead letter: written before the broker saw the ACCEPT, exactly one,
			// with its kind, key and attempts; none without a kind.
			n := seen.produced()
			written := endOffsets(t, brokers, "payments.dlq")
			if tc.wantKind == "" {
				if n != 0 || written != 0 || acts.dead != 0 {
					t.Fatalf("%d records produced, %d dead letters written, %d DeadLetterHook events; want none", n, written, acts.dead)
				}
			} else {
				copied, accepted := seen.copied(0), seen.position(0, kgo.AckAccept)
				if written != 1 || n != 1 || acts.dead != 1 || copied < 0 || copied > accepted {
					t.Fatalf("%d dead letters written (%d records produced), %d DeadLetterHook events, the copy of offset 0 at %d, its ACCEPT at %d; want 1 (1), 1, the copy first",
						written, n, acts.dead, copied, accepted)
				}
				dl := deadLetters(t, brokers, "payments.dlq", 1)[0]
				if header(dl, kafkashare.HeaderKind) != tc.wantKind || header(dl, kafkashare.HeaderKey) != "flaky" ||
					header(dl, kafkashare.HeaderAttempts) != strconv.FormatInt(runs.Load(), 10) || header(dl, kafkashare.HeaderOriginalOffset) != "0" {
					t.Fatalf("dead letter kind %q key %q attempts %q offset %q; want %s, flaky, %d, 0", header(dl, kafkashare.HeaderKind),
						header(dl, kafkashare.HeaderKey), header(dl, kafkashare.HeaderAttempts), header(dl, kafkashare.HeaderOriginalOffset),
						tc.wantKind, runs.Load())
				}
			}
			if tc.brokerDLQ != (acts.byReason["reject/broker-dead-letter"] == 1) || acts.byReason["accept/dead-lettered"] != btoi(tc.wantKind != "") {
				t.Fatalf("acknowledgements %v: want one reject/broker-dead-letter with WithBrokerDeadLetter, one accept/dead-lettered with a copy", acts.byReason)
			}

			// Near the limit: every delivery of count 4 or 5 the adapter settled,
			// and only those, is on the hook and in the log, with its key.
			var wantNear []int32
			for _, e := range acts.terminal {
				if e.DeliveryCount >= 4 {
					wantNear = append(wantNear, e.DeliveryCount)
				}
			}
			var gotNear []int32
			for _, e := range acts.nearEvents {
				gotNear = append(gotNear, e.DeliveryCount)
				if e.Key != "flaky" || e.Topic != "payments" || e.Offset != 0 || e.Limit != 5 || e.Source != kafkashare.Source || e.Scope != "payments" {
					t.Errorf("near-limit event %+v: want key flaky, payments offset 0, limit 5, source and scope set", e)
				}
			}
			var logged []int32
			for _, a := range logs.find(slog.LevelWarn, nearLimitMsg) {
				n, _ := strconv.Atoi(a["delivery_count"])
				logged = append(logged, int32(n))
				if a["limit"] != "5" || a["offset"] != "0" || a["topic"] != "payments" {
					t.Errorf("near-limit warning %v: want limit 5, payments offset 0", a)
				}
			}
			if (len(wantNear) == 0) != (last.DeliveryCount < 4) || !slices.Equal(gotNear, wantNear) || !slices.Equal(logged, wantNear) {
				t.Fatalf("deliveries settled at count 4 or 5: %v (the last at %d); DeliveryLimitHook saw %v, the log warned of %v; want the same",
					wantNear, last.DeliveryCount, gotNear, logged)
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
