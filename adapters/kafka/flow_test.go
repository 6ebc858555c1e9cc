package kafka_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/kafka"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// runs counts handler runs per id, and checks per-key order: each id's runs must
// see its records' sequence numbers ascending.
type runs struct {
	mu      sync.Mutex
	byID    map[string]int
	lastSeq map[string]int
	misord  int
}

func newRuns() *runs { return &runs{byID: map[string]int{}, lastSeq: map[string]int{}} }

func (r *runs) add(id string, seq int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byID[id]++
	if last, ok := r.lastSeq[id]; ok && seq < last {
		r.misord++
	}
	r.lastSeq[id] = seq
}

func (r *runs) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.byID {
		n += c
	}
	return n
}

// Records without an Idempotency-Key header get keys from their coordinates and
// the consumer group: a second service consuming the same topic with its own
// group (and scope) runs every record too, and each runs each record once.
func TestTwoGroupsEachRunEveryRecord(t *testing.T) {
	const n = 200
	brokers, _ := testenv.Kafka(t, 4, "signups", "signups.dlq")
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: "signups", Value: fmt.Appendf(nil, `{"id":"u-%d","amount":1}`, i)})
	}
	produceRaw(t, brokers, recs...)
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t) // one prefix: the services differ by group and scope only
	count := map[string]*atomic.Int64{"mailer": {}, "crm": {}}
	for group, c := range count {
		store, err := redisstore.NewStore(rdb, consumer.WithPrefix(prefix), consumer.WithScope(group))
		if err != nil {
			t.Fatal(err)
		}
		m, err := kafka.New(store, groupOpts(brokers, group, "signups"), func(context.Context, *kgo.Record) (int, error) {
			c.Add(1)
			return 0, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		startMember(t, m)
	}
	for group, c := range count {
		testenv.Eventually(t, 30*time.Second, group+" commits every offset", func() bool {
			l, _ := lag(t, brokers, group, "signups")
			return l == 0
		})
		if c.Load() != n {
			t.Fatalf("group %s ran %d handlers, want %d", group, c.Load(), n)
		}
	}
	// The default scope is refused: it would share records between services.
	store, err := redisstore.NewStore(rdb, consumer.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	_, err = kafka.New(store, groupOpts(brokers, "third", "signups"), func(context.Context, *kgo.Record) (int, error) { return 0, nil })
	if !errors.Is(err, kafka.ErrConfig) || !strings.Contains(err.Error(), "WithScope") {
		t.Fatalf("default scope: %v, want a configuration error naming WithScope", err)
	}
}

// In key mode the records of one Kafka key run in offset order, one at a time,
// while other keys run at once; a key whose handler stalls holds back only itself.
func TestKeyOrderAndStallIsolation(t *testing.T) {
	const keys, perKey = 40, 25
	brokers, _ := testenv.Kafka(t, 2, "ledger", "ledger.dlq")
	var recs []*kgo.Record
	for s := range perKey {
		for k := range keys {
			id := fmt.Sprintf("acct-%02d", k)
			recs = append(recs, &kgo.Record{Topic: "ledger", Key: []byte(id), Value: fmt.Appendf(nil, `{"id":"%s","amount":%d}`, id, s),
				Headers: []kgo.RecordHeader{{Key: kafka.DefaultKeyHeader, Value: fmt.Appendf(nil, "%s-%d", id, s)}}})
		}
	}
	produceRaw(t, brokers, recs...)
	store, _ := newStore(t)
	r := newRuns()
	release := make(chan struct{})
	var running, most atomic.Int32
	var others atomic.Int32
	handler := func(ctx context.Context, ev event, _ *kgo.Record) (string, error) {
		now := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		r.add(ev.ID, ev.Amount)
		if ev.ID == "acct-00" && ev.Amount == 3 {
			select { // the stalled record: acct-00's later records wait behind it
			case <-release:
			case <-ctx.Done():
				return "", context.Cause(ctx)
			}
		} else {
			if ev.ID != "acct-00" {
				others.Add(1)
			}
			time.Sleep(time.Millisecond)
		}
		return "ok", nil
	}
	// Each record has an idempotency key of its own (the header); the ordering
	// lane is the record's Kafka key, the account.
	c, err := kafka.NewTyped(store, groupOpts(brokers, "ledger-svc", "ledger"), decodeEvent, handler, kafka.WithOrdering(kafka.ByKey))
	if err != nil {
		t.Fatal(err)
	}
	startMember(t, c)
	// Everything but acct-00's records from the stalled one on settles while it is stalled.
	testenv.Eventually(t, 30*time.Second, "the other accounts' records to run", func() bool {
		return others.Load() == (keys-1)*perKey
	})
	r.mu.Lock()
	stalledRuns := r.byID["acct-00"]
	r.mu.Unlock()
	if stalledRuns != 4 {
		t.Fatalf("acct-00 ran %d records while its fourth was stalled, want 4 (those up to it, none after)", stalledRuns)
	}
	close(release)
	testenv.Eventually(t, 30*time.Second, "every offset committed", func() bool {
		l, _ := lag(t, brokers, "ledger-svc", "ledger")
		return l == 0
	})
	if got := r.total(); got != keys*perKey {
		t.Fatalf("%d handler runs, want %d", got, keys*perKey)
	}
	if r.misord != 0 {
		t.Fatalf("%d records of a key ran before an earlier one", r.misord)
	}
	if most.Load() < 8 {
		t.Fatalf("at most %d handlers ran at once: different keys should run concurrently", most.Load())
	}
}

// A permanent failure whose error text is 1.1 MB, on a record the dead-letter
// topic is too small for: the copy's error header is capped, the broker refuses
// the copy for its size, a body-less copy goes instead, and the partition moves on.
func TestOversizedDeadLetterGoesBodyLess(t *testing.T) {
	brokers, _ := testenv.Kafka(t, 1, "uploads")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	small := "65536"
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 1, 1, map[string]*string{"max.message.bytes": &small}, "uploads.dlq"); err != nil {
		t.Fatal(err)
	}
	noise := make([]byte, 50<<10) // incompressible: the producer compresses batches
	_, _ = rand.Read(noise)
	big := hex.EncodeToString(noise)
	produceRaw(t, brokers,
		&kgo.Record{Topic: "uploads", Value: []byte(`{"id":"huge","amount":1,"blob":"` + big + `"}`),
			Headers: []kgo.RecordHeader{{Key: kafka.DefaultKeyHeader, Value: []byte("huge")}}},
		&kgo.Record{Topic: "uploads", Value: []byte(`{"id":"tiny","amount":1}`),
			Headers: []kgo.RecordHeader{{Key: kafka.DefaultKeyHeader, Value: []byte("tiny")}}},
		&kgo.Record{Topic: "uploads", Value: []byte(`{"id":"after","amount":1}`),
			Headers: []kgo.RecordHeader{{Key: kafka.DefaultKeyHeader, Value: []byte("after")}}})
	store, book := newStore(t)
	var runs atomic.Int32
	handler := func(ctx context.Context, ev event, rec *kgo.Record) (string, error) {
		runs.Add(1)
		if ev.ID != "after" {
			return "", consumer.Permanent(errors.New(strings.Repeat("stack frame\n", 100_000))) // 1.2 MB
		}
		return charge(book)(ctx, ev, rec)
	}
	c, err := kafka.NewTyped(store, groupOpts(brokers, "uploads-svc", "uploads"), decodeEvent, handler,
		kafka.WithOrdering(kafka.ByPartition))
	if err != nil {
		t.Fatal(err)
	}
	startMember(t, c)
	testenv.Eventually(t, 30*time.Second, "every offset committed", func() bool {
		l, _ := lag(t, brokers, "uploads-svc", "uploads")
		return l == 0
	})
	counts, _ := book.Counts(t)
	if runs.Load() != 3 || counts["after"] != 1 {
		t.Fatalf("%d handler runs (want 3), after charged %d times (want 1)", runs.Load(), counts["after"])
	}
	dead := dlqRecords(t, brokers, "uploads.dlq")
	if len(dead) != 2 {
		t.Fatalf("%d dead letters, want 2", len(dead))
	}
	for _, d := range dead {
		key, errText := header(d, kafka.HeaderKey), header(d, kafka.HeaderError)
		if header(d, kafka.HeaderKind) != "PERMANENT" || len(errText) > kafka.MaxErrorHeader || !strings.Contains(errText, "cut from") {
			t.Errorf("dead letter of %s: kind %q, error of %d bytes", key, header(d, kafka.HeaderKind), len(errText))
		}
		switch key {
		case "huge": // too large with its body: the body-less copy
			if header(d, kafka.HeaderBodyLess) != "true" || len(d.Value) != 0 || header(d, kafka.HeaderOriginalOffset) != "0" {
				t.Errorf("huge: body-less %q, %d value bytes, offset %s", header(d, kafka.HeaderBodyLess), len(d.Value), header(d, kafka.HeaderOriginalOffset))
			}
		case "tiny": // fits once its error is capped: the whole copy
			if header(d, kafka.HeaderBodyLess) != "" || string(d.Value) != `{"id":"tiny","amount":1}` {
				t.Errorf("tiny: body-less %q, value %q", header(d, kafka.HeaderBodyLess), d.Value)
			}
		default:
			t.Errorf("dead letter of %q", key)
		}
	}
}
