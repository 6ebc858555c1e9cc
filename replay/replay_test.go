package replay_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/replay"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestMain(m *testing.M) { testenv.Run(m) }

func redisStore(t *testing.T, opts ...consumer.Option) *redisstore.Store {
	t.Helper()
	s, err := redisstore.NewStore(testenv.Redis(t), append([]consumer.Option{consumer.WithPrefix(testenv.Prefix(t)),
		consumer.WithScope("payments")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// produce writes n records to topic, record i with key header order-<i>.
func produce(t *testing.T, brokers []string, topic string, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	recs := make([]*kgo.Record, 0, 1000)
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("order-%05d", i)
		recs = append(recs, &kgo.Record{Key: []byte(k), Value: []byte(`{"order":"` + k + `"}`),
			Headers: []kgo.RecordHeader{{Key: "Idempotency-Key", Value: []byte(k)}}})
		if len(recs) == cap(recs) || i == n-1 {
			if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			recs = recs[:0]
		}
	}
}

// runs counts handler runs per key.
type runs struct {
	mu    sync.Mutex
	byKey map[consumer.Key]int
	total atomic.Int64
}

func (r *runs) add(k consumer.Key) int64 {
	r.mu.Lock()
	r.byKey[k]++
	r.mu.Unlock()
	return r.total.Add(1)
}

// A replay of 10,000 Kafka records of which 6,000 were processed: the plan says
// 6,000 DUPLICATE and 4,000 NEW; an execution interrupted after 1,500 runs and
// resumed from its checkpoint runs exactly the 4,000, each once.
func TestKafkaReplayPlanInterruptResume(t *testing.T) {
	const n, processed = 10000, 6000
	brokers, _ := testenv.Kafka(t, 4, "orders")
	produce(t, brokers, "orders", n)
	store := redisStore(t)
	ctx := context.Background()

	// The live consumer processed 6,000 of them (every key whose number ends in 0-5).
	var live []consumer.BatchItem
	for i := 0; i < n; i++ {
		if i%10 < 6 {
			k := fmt.Sprintf("order-%05d", i)
			live = append(live, consumer.BatchItem{Key: consumer.Key(k), Payload: []byte(`{"order":"` + k + `"}`)})
		}
	}
	for lo := 0; lo < len(live); lo += 500 {
		for _, r := range consumer.ExecuteBatch(ctx, store, live[lo:lo+500], func(context.Context, int, consumer.BatchItem) (int, error) { return 1, nil }) {
			if r.Outcome != consumer.Success {
				t.Fatalf("live processing: %+v", r)
			}
		}
	}

	open := func(opts ...replay.KafkaOption) *replay.KafkaSource {
		src, err := replay.OpenKafka(ctx, []kgo.Opt{kgo.SeedBrokers(brokers...)}, replay.KafkaRange{Topic: "orders"}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = src.Close() })
		return src
	}
	plan, err := replay.Plan(ctx, store, open())
	if err != nil {
		t.Fatal(err)
	}
	if plan.Messages != n || plan.Counts[replay.Duplicate] != processed || plan.Counts[replay.Unseen] != n-processed || len(plan.Counts) != 2 {
		t.Fatalf("plan: %d messages, %v", plan.Messages, plan.Counts)
	}

	r := &runs{byKey: map[consumer.Key]int{}}
	cp := replay.FileCheckpoint(filepath.Join(t.TempDir(), "cp.json"))
	ictx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	handler := func(ctx context.Context, m replay.Message) (string, error) {
		if r.add(m.Key) == 1500 {
			interrupt() // an operator's Ctrl-C
		}
		return "charged", nil
	}
	rep1, err := replay.Execute(ictx, store, open(), handler, replay.WithCheckpoint(cp), replay.WithBatchSize(200))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted execution: %v (%+v)", err, rep1.Counts)
	}
	first := r.total.Load()
	if first < 1500 || first >= n-processed {
		t.Fatalf("interrupted after %d runs", first)
	}
	saved, err := cp.Load()
	if err != nil || len(saved.Next) == 0 {
		t.Fatalf("checkpoint after the interruption: %+v, %v", saved, err)
	}

	rep2, err := replay.Execute(ctx, store, open(replay.ResumeFrom(saved)), handler, replay.WithCheckpoint(cp), replay.WithBatchSize(200))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.total.Load(); got != n-processed {
		t.Fatalf("handler runs in all: %d, want %d (first run %d, resumed %+v)", got, n-processed, first, rep2.Counts)
	}
	for k, c := range r.byKey {
		var i int
		fmt.Sscanf(string(k), "order-%05d", &i)
		if c != 1 || i%10 < 6 {
			t.Fatalf("key %s ran %d times", k, c)
		}
	}
	if rep1.Counts[replay.Ran]+rep2.Counts[replay.Ran] != n-processed {
		t.Fatalf("reports: RAN %d + %d", rep1.Counts[replay.Ran], rep2.Counts[replay.Ran])
	}
	// Everything is settled now: a plan over the range finds only duplicates.
	plan, err = replay.Plan(ctx, store, open())
	if err != nil || plan.Counts[replay.Duplicate] != n {
		t.Fatalf("plan after the replay: %v, %v", plan.Counts, err)
	}
}

func writeJSONL(t *testing.T, lines ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "msgs.jsonl")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func openJSONL(t *testing.T, path string) *replay.JSONLSource {
	t.Helper()
	src, err := replay.OpenJSONL(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	return src
}

// Payloads re-encoded since (pretty-printed JSON) conflict with what the live
// consumer fingerprinted, until WithCanonical gives the form it saw.
func TestJSONLCanonicalAndGuards(t *testing.T) {
	ctx := context.Background()
	store := redisStore(t)
	consumer.ExecuteIdempotently(ctx, store, "a", []byte(`{"amount":1,"to":"x"}`), func(context.Context) (int, error) { return 1, nil })
	old := time.Now().Add(-48 * time.Hour).UTC().Format(time.RFC3339)
	path := writeJSONL(t,
		`{"key":"a","payload":{ "amount": 1, "to": "x" }}`,
		`{"key":"b","payload":"plain text"}`,
		``,
		`{"payload":"no key"}`,
		`not json`,
		`{"key":"c","payload":"looped","headers":{"idemkit-replay-count":"5"}}`,
		`{"key":"d","payload":"old","time":"`+old+`"}`,
	)
	plan, err := replay.Plan(ctx, store, openJSONL(t, path))
	if err != nil {
		t.Fatal(err)
	}
	want := map[replay.Verdict]int{replay.Conflict: 1, replay.Unseen: 2, replay.Invalid: 2, replay.Quarantine: 1}
	if fmt.Sprint(plan.Counts) != fmt.Sprint(want) || plan.BeyondRetention != 1 || plan.BeyondRetentionNew != 1 {
		t.Fatalf("plan: %v, beyond retention %d/%d", plan.Counts, plan.BeyondRetention, plan.BeyondRetentionNew)
	}
	canon := replay.WithCanonical(func(m replay.Message) ([]byte, error) {
		if m.Key == "a" {
			return replay.CompactJSON(m)
		}
		return m.Payload, nil
	})
	plan, _ = replay.Plan(ctx, store, openJSONL(t, path), canon)
	if plan.Counts[replay.Duplicate] != 1 || plan.Counts[replay.Conflict] != 0 {
		t.Fatalf("plan with the canonical form: %v", plan.Counts)
	}

	var ran []string
	h := func(ctx context.Context, m replay.Message) (int, error) {
		ran = append(ran, string(m.Key)+"="+string(m.Payload))
		return 0, nil
	}
	var quarantined []string
	q := replay.WithQuarantine(func(m replay.Message) error { quarantined = append(quarantined, string(m.Key)); return nil })
	rep, err := replay.Execute(ctx, store, openJSONL(t, path), h, canon, q, replay.WithConcurrency(1))
	if !errors.Is(err, replay.ErrBeyondRetention) || len(ran) != 0 {
		t.Fatalf("execution over an old message: %v, ran %v", err, ran)
	}
	rep, err = replay.Execute(ctx, store, openJSONL(t, path), h, canon, q, replay.WithConcurrency(1), replay.WithAcceptBeyondRetention(true))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ran) != "[b=plain text d=old]" || fmt.Sprint(quarantined) != "[c c]" ||
		rep.Counts[replay.Ran] != 2 || rep.Counts[replay.Duplicate] != 1 || rep.Counts[replay.Invalid] != 2 {
		t.Fatalf("execution: ran %v, quarantined %v, %v", ran, quarantined, rep.Counts)
	}
	if rep.Checkpoint.Next[""] != 8 { // after line 7
		t.Fatalf("checkpoint: %+v", rep.Checkpoint)
	}
}

// A handler error that may go away holds the checkpoint before it; the messages
// after it still run, and a resumed replay runs only what did not settle.
func TestCheckpointStopsAtUnsettled(t *testing.T) {
	ctx := context.Background()
	store := redisStore(t)
	path := writeJSONL(t, `{"key":"1","payload":"x"}`, `{"key":"2","payload":"x"}`, `{"key":"3","payload":"x"}`)
	cp := replay.FileCheckpoint(filepath.Join(t.TempDir(), "cp.json"))
	fail := true
	var ran []string
	h := func(ctx context.Context, m replay.Message) (int, error) {
		ran = append(ran, string(m.Key))
		if m.Key == "2" && fail {
			return 0, errors.New("upstream timeout")
		}
		return 0, nil
	}
	rep, err := replay.Execute(ctx, store, openJSONL(t, path), h, replay.WithCheckpoint(cp), replay.WithConcurrency(1))
	if err != nil || rep.Counts[replay.Error] != 1 || rep.Checkpoint.Next[""] != 2 || len(rep.Errors) != 1 {
		t.Fatalf("first run: %+v, %v", rep, err)
	}
	fail = false
	rep, err = replay.Execute(ctx, store, openJSONL(t, path), h, replay.WithCheckpoint(cp), replay.WithConcurrency(1))
	if err != nil || fmt.Sprint(ran) != "[1 2 3 2]" || rep.Skipped != 1 || rep.Counts[replay.Duplicate] != 1 || rep.Checkpoint.Next[""] != 4 {
		t.Fatalf("resumed: ran %v, %+v, %v", ran, rep, err)
	}
	// A checkpoint of another source is refused.
	other := writeJSONL(t, `{"key":"1","payload":"x"}`)
	if _, err := replay.Execute(ctx, store, openJSONL(t, other), h, replay.WithCheckpoint(cp)); !errors.Is(err, replay.ErrConfig) {
		t.Fatalf("checkpoint of another file: %v", err)
	}
}
