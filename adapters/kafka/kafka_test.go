package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/kafka"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func newStore(t *testing.T, opts ...consumer.Option) (consumer.Store, *testenv.Ledger) {
	t.Helper()
	mk, book := newStores(t, opts...)
	return mk(), book
}

// newStores returns a maker of stores that share one set of records (one Redis,
// one prefix, scope "payments", opts), each with the options it is given besides:
// members observed apart each get a store of their own.
func newStores(t *testing.T, opts ...consumer.Option) (func(...consumer.Option) consumer.Store, *testenv.Ledger) {
	t.Helper()
	c := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	mk := func(more ...consumer.Option) consumer.Store {
		t.Helper()
		all := append([]consumer.Option{consumer.WithPrefix(prefix), consumer.WithScope("payments")}, opts...)
		s, err := redisstore.NewStore(c, append(all, more...)...)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	return mk, testenv.NewLedger(c, prefix)
}

func charge(l *testenv.Ledger) func(ctx context.Context, ev event, rec *kgo.Record) (string, error) {
	return func(ctx context.Context, ev event, rec *kgo.Record) (string, error) {
		if _, err := l.Apply(ctx, ev.ID); err != nil {
			return "", err
		}
		return "ch_" + ev.ID, nil
	}
}

// 10,000 events, 20% produced twice, 8 partitions; three members, a fourth joins
// and the first leaves mid-run. Every event is charged exactly once, every offset is
// committed, nothing is dead-lettered.
func TestExactlyOnceThroughRebalances(t *testing.T) {
	for _, o := range []kafka.Ordering{kafka.ByKey, kafka.ByPartition, kafka.Unordered} {
		t.Run(o.String(), func(t *testing.T) { exactlyOnceThroughRebalances(t, o) })
	}
}

func exactlyOnceThroughRebalances(t *testing.T, ordering kafka.Ordering) {
	const n = 10000
	brokers, _ := testenv.Kafka(t, 8, "payments", "payments.dlq")
	stores, book := newStores(t, consumer.WithLease(5*time.Second))
	events := produce(t, brokers, "payments", n, 0.2)
	var outcomes sync.Map
	hook := outcomeCounter{&outcomes}
	store := stores(consumer.WithObserver(hook))
	// The group runs at most 2,500 records a second, so that the run spans the
	// membership changes.
	pace := time.NewTicker(400 * time.Microsecond)
	defer pace.Stop()
	var handlerRuns, interrupted atomic.Int64
	handler := func(ctx context.Context, ev event, rec *kgo.Record) (string, error) {
		handlerRuns.Add(1)
		select {
		case <-pace.C:
		case <-ctx.Done():
			interrupted.Add(1)
			return "", context.Cause(ctx)
		}
		return charge(book)(ctx, ev, rec)
	}
	newMember := func(store consumer.Store, assigned, revoked *atomic.Int32) *kafka.Consumer[event, string] {
		c, err := kafka.NewTyped(store, groupOpts(brokers, "billing", "payments"), decodeEvent, handler,
			kafka.WithMaxPollRecords(500), kafka.WithOrdering(ordering),
			// Every revoked handler must finish inside the drain for none to run
			// twice; the default 5 s is too short for thousands of handlers
			// sharing one pace on a loaded machine (the cancellation that follows
			// a drain has its own test in handover_test.go).
			kafka.WithRevokeDrain(time.Minute), kafka.WithShutdownGrace(time.Minute),
			kafka.WithOnAssigned(func(_ context.Context, _ *kgo.Client, p map[string][]int32) {
				if len(p) > 0 {
					assigned.Add(1)
				}
			}),
			kafka.WithOnRevoked(func(_ context.Context, _ *kgo.Client, p map[string][]int32) {
				if len(p) > 0 {
					revoked.Add(1)
				}
			}))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	var firstRevoked, joinerAssigned, unused atomic.Int32
	var joinerSettled atomic.Int64
	m1 := startMember(t, newMember(store, &unused, &firstRevoked))
	startMember(t, newMember(store, &unused, &unused))
	startMember(t, newMember(store, &unused, &unused))
	testenv.Eventually(t, 60*time.Second, "a fifth of the events", func() bool { return book.Total(t) >= n/5 })
	// The joiner's store shares the records; its observers are its own.
	joiner := stores(consumer.WithObserver(hook, settledCounter{&joinerSettled}))
	startMember(t, newMember(joiner, &joinerAssigned, &unused)) // joins mid-run
	joinStart := time.Now()
	testenv.Eventually(t, 60*time.Second, "the joining member to get partitions", func() bool { return joinerAssigned.Load() > 0 })
	leftAtJoin := n - book.Total(t)
	t.Logf("joined after %v, %d left", time.Since(joinStart), leftAtJoin)
	testenv.Eventually(t, 60*time.Second, "two thirds of the events", func() bool { return book.Total(t) >= 2*n/3 })
	m1.stop() // leaves mid-run
	left := n - book.Total(t)
	testenv.Eventually(t, 90*time.Second, "every offset committed", func() bool {
		l, _ := lag(t, brokers, "billing", "payments")
		return l == 0
	})
	if leftAtJoin <= 0 || left <= 0 || firstRevoked.Load() == 0 {
		t.Fatalf("%d events were left when the joining member got partitions and %d when the first left (revoked %d times): the membership changes did not happen mid-run",
			leftAtJoin, left, firstRevoked.Load())
	}

	if handlerRuns.Load() != n {
		t.Fatalf("%d handler runs (%d interrupted), want %d: a revocation may neither lose a record nor run one twice", handlerRuns.Load(), interrupted.Load(), n)
	}
	counts, stale := book.Counts(t)
	if len(counts) != n {
		t.Fatalf("%d events charged, want %d", len(counts), n)
	}
	for _, ev := range events {
		if counts[ev.ID] != 1 {
			t.Errorf("event %s charged %d times", ev.ID, counts[ev.ID])
		}
	}
	if stale != 0 {
		t.Fatalf("%d stale writes: no member should have been fenced out", stale)
	}
	if recs := dlqRecords(t, brokers, "payments.dlq"); len(recs) != 0 {
		t.Fatalf("%d records dead-lettered, want none", len(recs))
	}
	success, duplicate := hook.get(consumer.Success), hook.get(consumer.Duplicate)
	if success != n || duplicate < n/5 {
		t.Fatalf("outcomes: %d SUCCESS (want %d), %d DUPLICATE (want at least %d)", success, n, duplicate, n/5)
	}
	t.Logf("%d SUCCESS, %d DUPLICATE; %d events left when the joiner got partitions (it settled %d), %d when the first member left",
		success, duplicate, leftAtJoin, joinerSettled.Load(), left)
}

// outcomeCounter counts, by outcome, the executions that ended their record:
// settled, or to be dead-lettered (not those run again later).
type outcomeCounter struct{ m *sync.Map }

func (h outcomeCounter) OnOutcome(e consumer.OutcomeEvent) {
	if e.Action != consumer.Ack && e.Action != consumer.DeadLetter {
		return
	}
	v, _ := h.m.LoadOrStore(e.Outcome, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func (h outcomeCounter) get(o consumer.Outcome) int {
	v, ok := h.m.Load(o)
	if !ok {
		return 0
	}
	return int(v.(*atomic.Int64).Load())
}

// settledCounter counts the records that ended settled.
type settledCounter struct{ n *atomic.Int64 }

func (c settledCounter) OnOutcome(e consumer.OutcomeEvent) {
	if e.Action == consumer.Ack {
		c.n.Add(1)
	}
}

// dlqCounter keeps the retry and dead-letter events.
type dlqCounter struct {
	mu      sync.Mutex
	retries []consumer.RetryEvent
	dead    []consumer.DeadLetterEvent
}

func (h *dlqCounter) OnRetry(e consumer.RetryEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.retries = append(h.retries, e)
}

func (h *dlqCounter) OnDeadLetter(e consumer.DeadLetterEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dead = append(h.dead, e)
}

// A poison record is retried in place and dead-lettered after exactly max
// attempts; a permanent failure, an undecodable record and a record without a
// usable key go to the dead-letter topic at once, with headers saying why.
func TestPoisonAndBadRecordsAreDeadLettered(t *testing.T) {
	brokers, _ := testenv.Kafka(t, 2, "orders", "orders.dlq")
	hooks := &dlqCounter{}
	store, book := newStore(t, consumer.WithMaxAttempts(3), consumer.WithObserver(hooks))
	var poisonRuns, permanentRuns atomic.Int32
	handler := func(ctx context.Context, ev event, rec *kgo.Record) (string, error) {
		switch ev.ID {
		case "poison":
			poisonRuns.Add(1)
			return "", errors.New("cannot reach the tax service")
		case "declined":
			permanentRuns.Add(1)
			return "", consumer.Permanent(errors.New("card declined"))
		}
		return charge(book)(ctx, ev, rec)
	}
	c, err := kafka.NewTyped(store, groupOpts(brokers, "orders-svc", "orders"), decodeEvent, handler,
		kafka.WithBackoff(5*time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	hdr := func(id string) []kgo.RecordHeader {
		return []kgo.RecordHeader{{Key: kafka.DefaultKeyHeader, Value: []byte(id)}}
	}
	recs := []*kgo.Record{
		{Topic: "orders", Partition: 0, Value: []byte(`{"id":"a","amount":1}`), Headers: hdr("a")},
		{Topic: "orders", Partition: 0, Value: []byte(`{"id":"poison","amount":2}`), Headers: hdr("poison")},
		{Topic: "orders", Partition: 0, Value: []byte(`{"id":"b","amount":3}`), Headers: hdr("b")},
		{Topic: "orders", Partition: 0, Value: []byte(`not json`), Headers: hdr("garbled")},
		{Topic: "orders", Partition: 0, Value: []byte(`{"id":"declined","amount":4}`), Headers: hdr("declined")},
		{Topic: "orders", Partition: 0, Value: []byte(`{"id":"nokey","amount":5}`), Headers: hdr("")},
		{Topic: "orders", Partition: 0, Value: []byte(`{"id":"c","amount":6}`), Headers: hdr("c")},
	}
	produceRaw(t, brokers, recs...)
	startMember(t, c)
	testenv.Eventually(t, 30*time.Second, "every offset committed", func() bool {
		l, _ := lag(t, brokers, "orders-svc", "orders")
		return l == 0
	})
	if poisonRuns.Load() != 3 || permanentRuns.Load() != 1 {
		t.Fatalf("poison ran %d times (want 3 = max attempts), permanent %d (want 1)", poisonRuns.Load(), permanentRuns.Load())
	}
	counts, _ := book.Counts(t)
	if counts["a"] != 1 || counts["b"] != 1 || counts["c"] != 1 || len(counts) != 3 {
		t.Fatalf("ledger %v, want a, b and c once each", counts)
	}
	dead := dlqRecords(t, brokers, "orders.dlq")
	if len(dead) != 4 {
		t.Fatalf("%d dead-lettered records, want 4", len(dead))
	}
	want := map[string]struct{ outcome, kind, attempts, offset, errText string }{
		"poison":   {"ERROR", "EXHAUSTED", "3", "1", "cannot reach the tax service"},
		"garbled":  {"ERROR", "UNDECODABLE", "0", "3", "undecodable"},
		"declined": {"ERROR", "PERMANENT", "1", "4", "card declined"},
		"":         {"ERROR", "NO_KEY", "0", "5", "no usable idempotency key"},
	}
	events := map[string]struct{ kind, offset, errText string }{}
	for key, w := range want {
		events[key] = struct{ kind, offset, errText string }{w.kind, w.offset, w.errText}
	}
	for i, d := range dead {
		key := header(d, kafka.HeaderKey)
		w, ok := want[key]
		if !ok || header(d, kafka.HeaderOriginalTopic) != "orders" || header(d, kafka.HeaderOriginalPartition) != "0" ||
			header(d, kafka.HeaderOutcome) != w.outcome || header(d, kafka.HeaderKind) != w.kind ||
			header(d, kafka.HeaderAttempts) != w.attempts || header(d, kafka.HeaderOriginalOffset) != w.offset ||
			!strings.Contains(header(d, kafka.HeaderError), w.errText) {
			t.Errorf("dead letter %d: headers %v, want for key %q outcome %s kind %s attempts %s offset %s error ~%q",
				i, d.Headers, key, w.outcome, w.kind, w.attempts, w.offset, w.errText)
		}
		delete(want, key)
	}
	// The observers were told of each with the record's coordinates and the reason.
	hooks.mu.Lock()
	defer hooks.mu.Unlock()
	if len(hooks.dead) != 4 || len(hooks.retries) != 2 {
		t.Fatalf("observers: %d dead letters, %d retries; want 4 and 2", len(hooks.dead), len(hooks.retries))
	}
	for _, e := range hooks.dead {
		w, ok := events[string(e.Key)]
		if !ok || e.Source != consumer.SourceKafka || e.Topic != "orders" || e.Partition != 0 ||
			strconv.FormatInt(e.Offset, 10) != w.offset || e.Kind != w.kind || e.Destination != "orders.dlq" ||
			e.Err == nil || !strings.Contains(e.Err.Error(), w.errText) {
			t.Errorf("dead-letter event %+v, want for key %q kind %s offset %s error ~%q", e, e.Key, w.kind, w.offset, w.errText)
		}
		delete(events, string(e.Key))
	}
	for i, e := range hooks.retries {
		if e.Key != "poison" || e.Topic != "orders" || e.Offset != 1 || e.Attempt != i+1 || e.Destination != "" ||
			e.Kind != consumer.KindHandler {
			t.Errorf("retry event %d: %+v, want attempt %d of poison at offset 1", i, e, i+1)
		}
	}
}

// OffsetCommit failures leave offsets pending and retried, never past an
// unsettled record; a failing dead-letter produce holds its partition at the
// poison record until the produce succeeds. Nothing is lost or run twice.
func TestCommitAndDeadLetterFaults(t *testing.T) {
	brokers, cluster := testenv.Kafka(t, 4, "ledger", "ledger.dlq")
	if cluster == nil {
		t.Skip("fault injection needs the in-process kfake cluster")
	}
	store, book := newStore(t, consumer.WithMaxAttempts(2))
	var commitFaults, dlqFaults atomic.Int32
	commitFaults.Store(5)
	dlqFaults.Store(6)
	cluster.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if commitFaults.Add(-1) < 0 {
			return nil, nil, false
		}
		r := req.(*kmsg.OffsetCommitRequest)
		resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.OffsetMetadataTooLarge.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	dlqID := topicID(t, brokers, "ledger.dlq")
	cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		r := req.(*kmsg.ProduceRequest)
		if len(r.Topics) == 0 || (r.Topics[0].Topic != "ledger.dlq" && r.Topics[0].TopicID != dlqID) || dlqFaults.Add(-1) < 0 {
			return nil, nil, false
		}
		resp := r.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.InvalidRecord.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})

	events := produce(t, brokers, "ledger", 400, 0.1)
	poison := &kgo.Record{Topic: "ledger", Partition: 1, Value: []byte(`{"id":"poison","amount":1}`),
		Headers: []kgo.RecordHeader{{Key: kafka.DefaultKeyHeader, Value: []byte("poison")}}}
	produceRaw(t, brokers, poison)
	after := &kgo.Record{Topic: "ledger", Partition: 1, Value: []byte(`{"id":"after-poison","amount":1}`),
		Headers: []kgo.RecordHeader{{Key: kafka.DefaultKeyHeader, Value: []byte("after-poison")}}}
	produceRaw(t, brokers, after)

	handler := func(ctx context.Context, ev event, rec *kgo.Record) (string, error) {
		if ev.ID == "poison" {
			return "", consumer.Permanent(errors.New("malformed ledger entry"))
		}
		return charge(book)(ctx, ev, rec)
	}
	c, err := kafka.NewTyped(store, groupOpts(brokers, "ledger-svc", "ledger"), decodeEvent, handler,
		kafka.WithBackoff(10*time.Millisecond, 50*time.Millisecond), kafka.WithOrdering(kafka.ByPartition))
	if err != nil {
		t.Fatal(err)
	}
	startMember(t, c)
	// While the dead-letter topic refuses, partition 1 may not be committed past
	// the poison record, and (ordered by partition) the record after it must not run.
	// (Faults only run down, so what was seen before a read of a positive count
	// was seen while every dead-letter produce so far had failed.)
	for {
		_, parts := lag(t, brokers, "ledger-svc", "ledger")
		counts, _ := book.Counts(t)
		if dlqFaults.Load() <= 0 {
			break
		}
		if parts[1] < 2 {
			t.Fatalf("partition 1 committed past the unsettled poison record (lag %d)", parts[1])
		}
		if counts["after-poison"] != 0 {
			t.Fatal("the record after the poison ran before the poison was settled")
		}
		time.Sleep(20 * time.Millisecond)
	}
	testenv.Eventually(t, 60*time.Second, "every offset committed", func() bool {
		l, _ := lag(t, brokers, "ledger-svc", "ledger")
		return l == 0
	})
	counts, _ := book.Counts(t)
	for _, ev := range events {
		if counts[ev.ID] != 1 {
			t.Fatalf("event %s charged %d times", ev.ID, counts[ev.ID])
		}
	}
	if counts["after-poison"] != 1 || counts["poison"] != 0 {
		t.Fatalf("after-poison charged %d times, poison %d", counts["after-poison"], counts["poison"])
	}
	dead := dlqRecords(t, brokers, "ledger.dlq")
	if len(dead) != 1 || header(dead[0], kafka.HeaderKey) != "poison" {
		t.Fatalf("dead letters: %d, want exactly the poison record once", len(dead))
	}
	if commitFaults.Load() > 0 {
		t.Fatalf("only %d commit faults were injected", 5-commitFaults.Load())
	}
}

func TestInvalidConfiguration(t *testing.T) {
	brokers, _ := testenv.Kafka(t, 1, "cfg")
	store, _ := newStore(t)
	h := func(ctx context.Context, rec *kgo.Record) (int, error) { return 0, nil }
	for _, tc := range []struct {
		name  string
		store consumer.Store
		kopts []kgo.Opt
		h     func(ctx context.Context, rec *kgo.Record) (int, error)
		opts  []kafka.Option
		hint  string
	}{
		{"no group", store, []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("cfg")}, h, nil, "kgo.ConsumerGroup"},
		{"no topics", store, []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ConsumerGroup("g")}, h, nil, "kgo.ConsumeTopics"},
		{"autocommit marks", store, append(groupOpts(brokers, "g", "cfg"), kgo.AutoCommitMarks()), h, nil, "AutoCommitMarks"},
		{"dlq consumed", store, groupOpts(brokers, "g", "cfg", "cfg.dlq"), h, nil, "WithDeadLetterTopic"},
		{"nil store", nil, groupOpts(brokers, "g", "cfg"), h, nil, "nil store"},
		{"nil handler", store, groupOpts(brokers, "g", "cfg"), nil, nil, "nil handler"},
		{"empty header", store, groupOpts(brokers, "g", "cfg"), h, []kafka.Option{kafka.WithKeyHeader("")}, "WithKeyHeader"},
		{"bad backoff", store, groupOpts(brokers, "g", "cfg"), h, []kafka.Option{kafka.WithBackoff(time.Second, time.Millisecond)}, "WithBackoff"},
		{"dead-letter partitions", store, groupOpts(brokers, "g", "cfg"), h, []kafka.Option{kafka.WithCreateDeadLetterTopics(0, 1)}, "WithCreateDeadLetterTopics(0, 1)"},
		{"dead-letter replicas", store, groupOpts(brokers, "g", "cfg"), h, []kafka.Option{kafka.WithCreateDeadLetterTopics(-1, -2)}, "WithCreateDeadLetterTopics(-1, -2)"},
		{"poll size", store, groupOpts(brokers, "g", "cfg"), h, []kafka.Option{kafka.WithMaxPollRecords(0)}, "WithMaxPollRecords"},
		{"value key type", store, groupOpts(brokers, "g", "cfg"), h,
			[]kafka.Option{kafka.WithValueKey(func(ev event) (consumer.Key, error) { return consumer.Key(ev.ID), nil })}, "WithValueKey"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := kafka.New(tc.store, tc.kopts, tc.h, tc.opts...)
			if err == nil {
				c.Client().Close()
				t.Fatal("accepted")
			}
			if !errors.Is(err, kafka.ErrConfig) || !strings.Contains(err.Error(), tc.hint) {
				t.Fatalf("err = %v, want ErrConfig mentioning %q", err, tc.hint)
			}
		})
	}
}

// Without an Idempotency-Key header the key comes from the record's coordinates;
// WithValueKey takes it from the event.
func TestKeyChoice(t *testing.T) {
	brokers, _ := testenv.Kafka(t, 1, "keys", "keys.dlq")
	store, book := newStore(t)
	produceRaw(t, brokers,
		&kgo.Record{Topic: "keys", Value: []byte(`{"id":"x","amount":1}`)},
		&kgo.Record{Topic: "keys", Value: []byte(`{"id":"x","amount":1}`)}, // same event, no header: another offset
		&kgo.Record{Topic: "keys", Value: []byte(`{"id":"y","amount":1}`)},
	)
	var runs atomic.Int32
	byCoordinates, err := kafka.NewTyped(store, groupOpts(brokers, "coords", "keys"), decodeEvent,
		func(ctx context.Context, ev event, rec *kgo.Record) (int, error) { runs.Add(1); return 0, nil })
	if err != nil {
		t.Fatal(err)
	}
	m := startMember(t, byCoordinates)
	testenv.Eventually(t, 30*time.Second, "coords group done", func() bool { l, _ := lag(t, brokers, "coords", "keys"); return l == 0 })
	m.stop()
	if runs.Load() != 3 {
		t.Fatalf("coordinate keys: %d runs, want 3 (a republished event is another record)", runs.Load())
	}
	byValue, err := kafka.NewTyped(store, groupOpts(brokers, "byvalue", "keys"), decodeEvent, charge(book),
		kafka.WithValueKey(func(ev event) (consumer.Key, error) { return consumer.ParseKey("evt:" + ev.ID) }))
	if err != nil {
		t.Fatal(err)
	}
	startMember(t, byValue)
	testenv.Eventually(t, 30*time.Second, "byvalue group done", func() bool { l, _ := lag(t, brokers, "byvalue", "keys"); return l == 0 })
	counts, _ := book.Counts(t)
	if fmt.Sprint(counts) != "map[x:1 y:1]" {
		t.Fatalf("value keys: ledger %v, want x and y once", counts)
	}
}
