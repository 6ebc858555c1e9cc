package kafka_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/kafka"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Rolling restarts during one long handler do not use its attempts up: each
// member's shutdown cancels the handler, which honours it; the claim is released
// uncounted, and with one attempt allowed the last member still runs the record
// to completion. Nothing is dead-lettered.
func TestInterruptedHandlersAreNotCharged(t *testing.T) {
	brokers, _ := testenv.Kafka(t, 1, "charges", "charges.dlq")
	produceRaw(t, brokers, &kgo.Record{Topic: "charges", Key: []byte("order-1"), Value: []byte(`{"id":"order-1","amount":5}`)})
	store, err := redisstore.NewStore(testenv.Redis(t), consumer.WithPrefix(testenv.Prefix(t)),
		consumer.WithScope("charges"), consumer.WithMaxAttempts(1))
	if err != nil {
		t.Fatal(err)
	}
	var started, completed atomic.Int32
	newMember := func(finish bool) (*member, chan struct{}) {
		began := make(chan struct{}, 1)
		c, err := kafka.New(store, groupOpts(brokers, "charges", "charges"),
			func(ctx context.Context, rec *kgo.Record) (int, error) {
				started.Add(1)
				began <- struct{}{}
				if finish {
					completed.Add(1)
					return 1, nil
				}
				<-ctx.Done() // a long charge, cut short by the member's shutdown
				return 0, ctx.Err()
			})
		if err != nil {
			t.Fatal(err)
		}
		return startMember(t, c), began
	}
	for i := range 3 {
		m, began := newMember(false)
		select {
		case <-began:
		case <-time.After(time.Minute):
			t.Fatalf("restart %d: the handler never started", i)
		}
		m.stop()
	}
	newMember(true)
	testenv.Eventually(t, time.Minute, "the last member commits the record", func() bool {
		l, _ := lag(t, brokers, "charges", "charges")
		return l == 0
	})
	if started.Load() != 4 || completed.Load() != 1 {
		t.Fatalf("handlers started %d, completed %d; want 4 and 1", started.Load(), completed.Load())
	}
	if dl := dlqRecords(t, brokers, "charges.dlq"); len(dl) != 0 {
		t.Fatalf("%d dead letters, want none", len(dl))
	}
}
