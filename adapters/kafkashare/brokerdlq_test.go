package kafkashare_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/kafkashare"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The records that must be dead-lettered: a poison record, its second
// publication (a DUPLICATE of a key that failed for good), an undecodable record
// and one with an unusable key, among 30 events (6 of them published twice).
// By default each gets idemkit's copy, written before the broker sees its
// ACCEPT. With WithBrokerDeadLetter they are handed to the broker instead:
// REJECTed, with no copy of idemkit's (no record produced at all, and no
// dead-letter topic needed: none exists in that case). Either way exactly those
// four are dead-lettered, each acknowledged once; every other record is accepted
// once, its effect made once; nothing is released; the poison handler ran once;
// nothing is left unfinished.
func TestBrokerDeadLetterRejects(t *testing.T) {
	for _, brokerDLQ := range []bool{false, true} {
		name := "idemkit copy then accept"
		if brokerDLQ {
			name = "broker dead letter"
		}
		t.Run(name, func(t *testing.T) {
			topics := []string{"payments", "payments.dlq"}
			if brokerDLQ {
				topics = topics[:1]
			}
			brokers, cluster := shareKfake(t, 1, topics...)
			startAtEarliest(t, brokers, "billing")
			prefix := testenv.Prefix(t)
			book := testenv.NewLedger(testenv.Redis(t), prefix)
			poison := func() *kgo.Record {
				return &kgo.Record{Topic: "payments", Value: []byte(`{"id":"poison","amount":1}`),
					Headers: []kgo.RecordHeader{{Key: kafkashare.DefaultKeyHeader, Value: []byte("poison")}}}
			}
			// Offsets: 0-29 the events, then the four to dead-letter, in this order.
			events := produce(t, brokers, "payments", 24, 0.25)
			produceRaw(t, brokers, poison())
			produceRaw(t, brokers, &kgo.Record{Topic: "payments", Value: []byte(`not json`)})
			produceRaw(t, brokers, &kgo.Record{Topic: "payments", Value: []byte(`{"id":"keyless","amount":1}`),
				Headers: []kgo.RecordHeader{{Key: kafkashare.DefaultKeyHeader, Value: nil}}})
			produceRaw(t, brokers, poison())
			const good, total = 30, 34
			dead := []int64{30, 31, 32, 33}
			seen := watchBroker(cluster)
			acts := newActions()
			var poisonRuns atomic.Int64
			opts := []kafkashare.Option{kafkashare.WithMaxPollRecords(10)}
			if brokerDLQ {
				opts = append(opts, kafkashare.WithBrokerDeadLetter())
			}
			c, err := kafkashare.NewTyped(newStore(t, prefix, acts),
				append(shareOpts(brokers, "billing", "payments"), kgo.ProducerBatchCompression(kgo.NoCompression())), decodeEvent,
				func(ctx context.Context, ev event, _ *kgo.Record) (int, error) {
					if ev.ID == "poison" {
						poisonRuns.Add(1)
						return 0, consumer.Permanent(errors.New("card declined"))
					}
					_, err := book.Apply(ctx, ev.ID)
					return ev.Amount, err
				}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			run(t, c)
			testenv.Eventually(t, 60*time.Second, "every record finished", func() bool {
				return unfinished(t, brokers, "billing", "payments", 1) == 0
			})
			deadStatus, wantCopies, deadReason := kgo.AckAccept, len(dead), "accept/dead-lettered"
			if brokerDLQ {
				deadStatus, wantCopies, deadReason = kgo.AckReject, 0, "reject/broker-dead-letter"
			}
			for off := range int64(total) {
				want := []kgo.AckStatus{kgo.AckAccept}
				if slices.Contains(dead, off) {
					want = []kgo.AckStatus{deadStatus}
				}
				if got := seen.statuses(off); !slices.Equal(got, want) {
					t.Errorf("the broker saw %v for offset %d, want %v", got, off, want)
				}
			}
			if n := seen.produced(); n != wantCopies {
				t.Fatalf("%d records produced while consuming; want %d", n, wantCopies)
			}
			if !brokerDLQ {
				for _, off := range dead {
					if copied := seen.copied(off); copied < 0 || copied > seen.position(off, kgo.AckAccept) {
						t.Errorf("the copy of offset %d reached the broker at %d, its ACCEPT at %d; want the copy first",
							off, copied, seen.position(off, kgo.AckAccept))
					}
				}
				if n := endOffsets(t, brokers, "payments.dlq"); n != int64(len(dead)) {
					t.Fatalf("%d dead letters written, want %d", n, len(dead))
				}
			}
			counts, stale := book.Counts(t)
			for _, ev := range events {
				if counts[ev.ID] != 1 {
					t.Errorf("event %s charged %d times, want 1", ev.ID, counts[ev.ID])
				}
			}
			acts.mu.Lock()
			defer acts.mu.Unlock()
			accepted := acts.byReason["accept/success"] + acts.byReason["accept/duplicate"]
			if stale != 0 || poisonRuns.Load() != 1 || accepted != good || acts.byReason[deadReason] != len(dead) ||
				acts.dead != wantCopies || acts.byReason["accept/duplicate"] != 6 || len(acts.byReason) != 3 {
				t.Fatalf("stale writes %d, poison runs %d, accepted %d, dead-lettered %d, DeadLetterHook events %d (acknowledgements %v); want 0, 1, %d (6 duplicates), %d, %d",
					stale, poisonRuns.Load(), accepted, acts.byReason[deadReason], acts.dead, acts.byReason, good, len(dead), wantCopies)
			}
		})
	}
}
