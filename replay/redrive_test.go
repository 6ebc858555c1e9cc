package replay_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/kafka"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/replay"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A dead-letter topic of 100 poison messages: once the bug is fixed, a redrive with
// Rerun runs each exactly once more; a second redrive runs nothing.
func TestRedriveKafkaWithRerun(t *testing.T) {
	const n = 100
	brokers, _ := testenv.Kafka(t, 2, "orders", "orders.dlq")
	produce(t, brokers, "orders", n)
	store := redisStore(t)
	var fixed atomic.Bool
	var mu sync.Mutex
	runs := map[string]int{}
	var total atomic.Int64
	consume := func(t *testing.T, until func() bool) {
		t.Helper()
		c, err := kafka.New(store, []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ConsumerGroup("payments"), kgo.ConsumeTopics("orders"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())},
			func(ctx context.Context, rec *kgo.Record) (string, error) {
				mu.Lock()
				runs[string(rec.Key)]++
				mu.Unlock()
				total.Add(1)
				if !fixed.Load() {
					return "", consumer.Permanent(errors.New("bad expiry date format"))
				}
				return "charged", nil
			})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		testenv.Eventually(t, 60*time.Second, "the consumer settles its records", until)
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	}
	adm, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	dlqSize := func() int64 {
		ends, err := kadm.NewClient(adm).ListEndOffsets(context.Background(), "orders.dlq")
		if err != nil {
			return -1
		}
		var s int64
		ends.Each(func(o kadm.ListedOffset) { s += o.Offset })
		return s
	}
	consume(t, func() bool { return dlqSize() == n })
	if total.Load() != n {
		t.Fatalf("poison run: %d handler runs, want %d", total.Load(), n)
	}

	ctx := context.Background()
	openDLQ := func() replay.Source {
		src, err := replay.OpenKafka(ctx, []kgo.Opt{kgo.SeedBrokers(brokers...)}, replay.KafkaRange{Topic: "orders.dlq"},
			replay.KeyHeader("idemkit-key"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = src.Close() })
		return src
	}
	// Planned first: nothing is republished without Execute, and failed keys need Rerun.
	rep, err := replay.RedriveKafka(ctx, store, openDLQ(), adm, replay.RedriveOptions{})
	if err != nil || rep.Counts[replay.NotRerunnable] != n || rep.Kinds["PERMANENT"] != n {
		t.Fatalf("dry redrive: %+v, %v", rep, err)
	}
	fixed.Store(true)
	rep, err = replay.RedriveKafka(ctx, store, openDLQ(), adm, replay.RedriveOptions{Rerun: true, Execute: true,
		Actor: "alice", Reason: "expiry parser fixed"})
	if err != nil || rep.Counts[replay.Redriven] != n {
		t.Fatalf("redrive: %+v, %v", rep, err)
	}
	consume(t, func() bool { return total.Load() >= 2*n })
	// A second redrive finds every key completed and republishes nothing.
	rep, err = replay.RedriveKafka(ctx, store, openDLQ(), adm, replay.RedriveOptions{Rerun: true, Execute: true, Actor: "alice", Reason: "again"})
	if err != nil || rep.Counts[replay.Done] != n {
		t.Fatalf("second redrive: %+v, %v", rep, err)
	}
	if total.Load() != 2*n {
		t.Fatalf("handler runs: %d, want %d", total.Load(), 2*n)
	}
	for k, c := range runs {
		if c != 2 {
			t.Fatalf("%s ran %d times, want 2 (the poison run and one more)", k, c)
		}
	}
	if len(runs) != n {
		t.Fatalf("%d keys ran", len(runs))
	}
}
