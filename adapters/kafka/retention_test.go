package kafka_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/kafka"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/memory"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A running consumer keeps the records it has finished only as long as the
// engine's current handler contexts refer to them: a handler context outlives its
// record (a handler may keep it, and the engine allocates them in slabs), and a
// finished record must not keep the slab of its last run, and through it older
// fetches, alive. Here 2,000 records go through polls of 37; once all are
// settled, at most ten polls' worth may be left after a collection (every
// record was left while finished records kept their last handler context).
func TestFinishedRecordsAreCollected(t *testing.T) {
	// Polls of 37: they straddle the engine's slabs of handler contexts, which is
	// what would link one fetch's slab to the previous one's.
	const n, perPoll = 2000, 37
	brokers, _ := testenv.Kafka(t, 1, "orders", "orders.dlq")
	body := make([]byte, 1<<10)
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: "orders", Value: body, Headers: []kgo.RecordHeader{
			{Key: kafka.DefaultKeyHeader, Value: []byte("order-" + strconv.Itoa(i))}}}
	}
	produceRaw(t, brokers, recs...)
	store, err := memory.NewStore(consumer.WithScope("orders"))
	if err != nil {
		t.Fatal(err)
	}
	seen := &testenv.Handed[kgo.Record]{}
	c, err := kafka.New(store, groupOpts(brokers, "shop", "orders"),
		func(_ context.Context, rec *kgo.Record) (int, error) {
			seen.Add(rec)
			return 0, nil
		}, kafka.WithMaxPollRecords(perPoll))
	if err != nil {
		t.Fatal(err)
	}
	startMember(t, c)
	for deadline := time.Now().Add(60 * time.Second); seen.Len() < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d records ran", seen.Len(), n)
		}
	}

	if got := seen.Len(); got != n {
		t.Fatalf("%d handler runs, want %d", got, n)
	}
	if live := seen.Reachable(10 * perPoll); live > 10*perPoll {
		t.Errorf("%d of %d finished records still reachable, want at most %d: finished records are kept alive", live, n, 10*perPoll)
	}
}
