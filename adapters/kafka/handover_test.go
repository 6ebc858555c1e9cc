package kafka_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/kafka"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A record whose handler finishes, or whose dead-letter copy is confirmed, while
// its partition's revocation drains is committed by that drain: the partition's
// next owner does not receive it again, and its dead-letter copy exists once.
func TestRevocationCommitsWhatSettlesDuringTheDrain(t *testing.T) {
	for _, tc := range []struct {
		name   string
		poison bool
	}{
		{"handler finishes", false},
		{"dead letter confirmed", true},
	} {
		t.Run(tc.name, func(t *testing.T) { revocationDrain(t, tc.poison) })
	}
}

func revocationDrain(t *testing.T, poison bool) {
	brokers, cluster := testenv.Kafka(t, 1, "drain", "drain.dlq")
	if poison && cluster == nil {
		t.Skip("holding a dead-letter produce needs the in-process kfake cluster")
	}
	stores, _ := newStores(t, consumer.WithLease(5*time.Second))
	produceRaw(t, brokers, eventRecord("drain", "held"))

	held, release := make(chan struct{}), make(chan struct{})
	var holdOnce sync.Once
	hold := func() { holdOnce.Do(func() { close(held) }) }
	if poison { // the first dead-letter copy is answered only once released
		dlqID := topicID(t, brokers, "drain.dlq")
		cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
			r := req.(*kmsg.ProduceRequest)
			if len(r.Topics) > 0 && (r.Topics[0].Topic == "drain.dlq" || r.Topics[0].TopicID == dlqID) {
				hold()
				cluster.SleepControl(func() { <-release })
			}
			return nil, nil, false
		})
	}
	var mu sync.Mutex
	runs := map[string]int{}
	handler := func(ctx context.Context, ev event, rec *kgo.Record) (string, error) {
		mu.Lock()
		runs[ev.ID]++
		mu.Unlock()
		switch {
		case ev.ID != "held":
			return "ok", nil
		case poison:
			return "", consumer.Permanent(errors.New("malformed entry"))
		}
		hold()
		select {
		case <-release:
			return "ok", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	var outcomes sync.Map
	dead := &dlqCounter{}
	// Each member has a store of its own (the records are shared) observed by
	// the counters and by the member's own observers obs.
	newMember := func(obs []consumer.Observer, opts ...kafka.Option) *kafka.Consumer[event, string] {
		kopts := append(groupOpts(brokers, "drain-svc", "drain"), kgo.Balancers(kgo.RangeBalancer())) // eager: a join revokes everything
		store := stores(consumer.WithObserver(append(obs, outcomeCounter{&outcomes}, dead)...))
		opts = append(opts, kafka.WithRevokeDrain(30*time.Second))
		c, err := kafka.NewTyped(store, kopts, decodeEvent, handler, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	// The first member's revocation: what it committed when its drain ended.
	logs := &logWatch{}
	first := &commitWatch{}
	revoked := make(chan int64, 1)
	startMember(t, newMember([]consumer.Observer{first}, kafka.WithLogger(logs.logger()),
		kafka.WithOnRevoked(func(context.Context, *kgo.Client, map[string][]int32) {
			select {
			case revoked <- first.at.Load():
			default:
			}
		})))
	wait(t, held, "the record is held")
	draining := logs.next("kafka: partitions revoked")
	startMember(t, newMember(nil)) // the join revokes the partition from the first member
	wait(t, draining, "the first member's revocation drains")
	close(release) // the record settles inside the drain
	var at int64
	select {
	case at = <-revoked:
	case <-time.After(30 * time.Second):
		t.Fatal("the revocation never ended")
	}

	// Whoever owns the partition next starts at the committed offset; once the
	// record produced now is committed, anything it received again is settled too.
	produceRaw(t, brokers, eventRecord("drain", "after"))
	testenv.Eventually(t, 30*time.Second, "every offset committed", func() bool {
		l, _ := lag(t, brokers, "drain-svc", "drain")
		return l == 0
	})
	if at != 1 {
		t.Errorf("the revocation committed offset %d, want 1: the record that settled during the drain was left to the next owner", at)
	}
	mu.Lock()
	heldRuns, afterRuns := runs["held"], runs["after"]
	mu.Unlock()
	if heldRuns != 1 || afterRuns != 1 {
		t.Errorf("handler runs: held %d, after %d; want 1 each", heldRuns, afterRuns)
	}
	h := outcomeCounter{&outcomes}
	wantSuccess, wantError := 2, 0
	if poison {
		wantSuccess, wantError = 1, 1
	}
	if s, d, e := h.get(consumer.Success), h.get(consumer.Duplicate), h.get(consumer.Error); s != wantSuccess || d != 0 || e != wantError {
		t.Errorf("outcomes: %d SUCCESS, %d DUPLICATE, %d ERROR; want %d, 0, %d", s, d, e, wantSuccess, wantError)
	}
	if !poison {
		return
	}
	dead.mu.Lock()
	reported := len(dead.dead)
	dead.mu.Unlock()
	if copies := dlqRecords(t, brokers, "drain.dlq"); len(copies) != 1 || reported != 1 {
		t.Errorf("%d dead-letter copies (%d reported), want exactly 1", len(copies), reported)
	}
}

// A partition lost while a record's dead-letter copy is in flight commits nothing
// of what settles after the loss (another member may own it): the partition's
// next owner receives the record again and dead-letters it again, and the offset
// is committed only after that second copy.
func TestLostPartitionCommitsNothingThatSettlesAfterTheLoss(t *testing.T) {
	brokers, cluster := testenv.Kafka(t, 1, "lost", "lost.dlq")
	if cluster == nil {
		t.Skip("holding a dead-letter produce and fencing a member out need the in-process kfake cluster")
	}
	events := &eventOrder{}
	store, _ := newStore(t, consumer.WithLease(5*time.Second), consumer.WithObserver(events))
	produceRaw(t, brokers, eventRecord("lost", "poison"))
	held, release := make(chan struct{}), make(chan struct{})
	var holdOnce sync.Once
	dlqID := topicID(t, brokers, "lost.dlq")
	cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r := req.(*kmsg.ProduceRequest)
		if len(r.Topics) > 0 && (r.Topics[0].Topic == "lost.dlq" || r.Topics[0].TopicID == dlqID) {
			holdOnce.Do(func() {
				close(held)
				cluster.SleepControl(func() { <-release })
			})
		}
		return nil, nil, false
	})
	var runs atomic.Int32
	handler := func(context.Context, event, *kgo.Record) (string, error) {
		runs.Add(1)
		return "", consumer.Permanent(errors.New("malformed entry"))
	}
	logs := &logWatch{}
	kopts := append(groupOpts(brokers, "lost-svc", "lost"), kgo.SessionTimeout(time.Second))
	c, err := kafka.NewTyped(store, kopts, decodeEvent, handler, kafka.WithLogger(logs.logger()))
	if err != nil {
		t.Fatal(err)
	}
	lost := logs.next("kafka: partitions lost")
	startMember(t, c)
	wait(t, held, "the first dead-letter copy is held")
	// The member's next heartbeat learns that it was fenced out.
	cluster.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = kerr.UnknownMemberID.Code
		return resp, nil, true
	})
	wait(t, lost, "the partition is lost")
	close(release) // the first copy is confirmed after the loss
	testenv.Eventually(t, 30*time.Second, "every offset committed", func() bool {
		l, _ := lag(t, brokers, "lost-svc", "lost")
		return l == 0
	})
	copies := dlqRecords(t, brokers, "lost.dlq")
	if runs.Load() != 1 || len(copies) != 2 {
		t.Fatalf("%d handler runs, %d dead-letter copies; want 1 run and 2 copies (the lost partition's settlement is not committed)",
			runs.Load(), len(copies))
	}
	if got := events.String(); got != "dead-letter dead-letter commit 1" {
		t.Fatalf("events %q: the offset was committed before the next owner's copy", got)
	}
}

// eventOrder keeps the order of a member's dead letters and commits.
type eventOrder struct {
	mu     sync.Mutex
	events []string
}

func (o *eventOrder) add(e string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, e)
}

func (o *eventOrder) OnDeadLetter(consumer.DeadLetterEvent) { o.add("dead-letter") }
func (o *eventOrder) OnCommit(e consumer.CommitEvent) {
	if e.Err == nil {
		o.add("commit " + strconv.FormatInt(e.Offset, 10))
	}
}

func (o *eventOrder) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return strings.Join(o.events, " ")
}

// Shutting down while a record waits for its retry takes the shutdown grace, not
// also the revocation drain: when Run ends, the member leaves the group without
// waiting for a record that will not run here any more.
func TestShutdownDoesNotWaitForTheRevocationDrain(t *testing.T) {
	brokers, _ := testenv.Kafka(t, 1, "retrying", "retrying.dlq")
	store, _ := newStore(t, consumer.WithMaxAttempts(100))
	produceRaw(t, brokers, eventRecord("retrying", "flaky"))
	var runs atomic.Int32
	c, err := kafka.NewTyped(store, groupOpts(brokers, "retrying-svc", "retrying"), decodeEvent,
		func(context.Context, event, *kgo.Record) (string, error) { runs.Add(1); return "", errors.New("flaky") },
		kafka.WithBackoff(time.Minute, time.Minute), kafka.WithShutdownGrace(100*time.Millisecond),
		kafka.WithRevokeDrain(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	m := startMember(t, c)
	testenv.Eventually(t, 30*time.Second, "the record failed once", func() bool { return runs.Load() == 1 })
	m.cancel()
	select {
	case <-m.done:
		m.done <- nil
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s: it waited for the revocation drain (a minute) after its shutdown")
	}
	if l, _ := lag(t, brokers, "retrying-svc", "retrying"); l != 1 || runs.Load() != 1 {
		t.Fatalf("lag %d, %d runs; want 1 and 1 (the unsettled record is not committed)", l, runs.Load())
	}
}

// commitWatch keeps the highest offset a member committed.
type commitWatch struct{ at atomic.Int64 }

func (w *commitWatch) OnCommit(e consumer.CommitEvent) {
	for e.Err == nil {
		cur := w.at.Load()
		if e.Offset <= cur || w.at.CompareAndSwap(cur, e.Offset) {
			return
		}
	}
}

func eventRecord(topic, id string) *kgo.Record {
	return &kgo.Record{Topic: topic, Value: []byte(`{"id":"` + id + `","amount":1}`),
		Headers: []kgo.RecordHeader{{Key: kafka.DefaultKeyHeader, Value: []byte(id)}}}
}

func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for: %s", what)
	}
}
