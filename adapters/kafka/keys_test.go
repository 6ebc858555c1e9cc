package kafka_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/kafka"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The records of one fetch take their keys from their own headers, whatever their
// lengths and whichever records lack the header: each handler sees its record's
// key and headers; a record without the header gets a key of its own from its
// coordinates, one whose header is empty is dead-lettered NO_KEY, and a repeated
// key runs once.
func TestKeysOfOneFetch(t *testing.T) {
	brokers, _ := testenv.Kafka(t, 1, "mixed", "mixed.dlq")
	keyed := func(key string, more ...kgo.RecordHeader) *kgo.Record {
		return &kgo.Record{Topic: "mixed", Value: []byte(`{}`),
			Headers: append([]kgo.RecordHeader{{Key: kafka.DefaultKeyHeader, Value: []byte(key)}}, more...)}
	}
	long := "order-0000000000000042-with-a-long-tail-of-text"
	produceRaw(t, brokers,
		keyed("a"), // offset 0
		keyed(long),
		&kgo.Record{Topic: "mixed", Value: []byte(`{}`), Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("t2")}}},
		keyed(""), // offset 3: no usable key
		keyed("a"),
		keyed("b", kgo.RecordHeader{Key: "trace", Value: []byte("t5")}, kgo.RecordHeader{Key: kafka.DefaultKeyHeader, Value: []byte("second")}),
		keyed("ü-ñ"), // offset 6
	)
	store, _ := newStore(t)
	type seen struct {
		key   consumer.Key
		trace string
	}
	var mu sync.Mutex
	ran := map[int64]seen{}
	runs := 0
	c, err := kafka.New(store, groupOpts(brokers, "keys-of-one-fetch", "mixed"), func(ctx context.Context, rec *kgo.Record) (int, error) {
		info, _ := consumer.InfoFromContext(ctx)
		var trace string
		if h, ok := consumer.CarrierFromContext(ctx); ok {
			trace = h.Get("trace")
		}
		mu.Lock()
		defer mu.Unlock()
		runs++
		ran[rec.Offset] = seen{info.Key, trace}
		return 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	m := startMember(t, c)
	testenv.Eventually(t, 30*time.Second, "every offset committed", func() bool {
		l, _ := lag(t, brokers, "keys-of-one-fetch", "mixed")
		return l == 0
	})
	m.stop()

	mu.Lock()
	defer mu.Unlock()
	if runs != 5 {
		t.Fatalf("%d handler runs (%v), want 5: offsets 0, 1, 2, 5, 6 (3 has no key, 4 repeats 0's)", runs, ran)
	}
	want := map[int64]seen{0: {"a", ""}, 1: {consumer.Key(long), ""}, 5: {"b", "t5"}, 6: {"ü-ñ", ""}}
	for off, w := range want {
		if ran[off] != w {
			t.Errorf("offset %d ran with key %q and trace %q, want %q and %q", off, ran[off].key, ran[off].trace, w.key, w.trace)
		}
	}
	if got := ran[2]; got.key.Validate() != nil || got.trace != "t2" || got.key == "a" || got.key == "b" {
		t.Errorf("offset 2 (no key header) ran with key %q and trace %q, want a key from its coordinates and trace t2", got.key, got.trace)
	}
	dead := dlqRecords(t, brokers, "mixed.dlq")
	if len(dead) != 1 || header(dead[0], kafka.HeaderKind) != "NO_KEY" || header(dead[0], kafka.HeaderOriginalOffset) != strconv.Itoa(3) {
		t.Fatalf("%d dead letters, want one NO_KEY copy of offset 3: %v", len(dead), dead)
	}
}
