package kafka_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/kafka"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A named topic whose dead-letter topic does not exist: Run refuses at once, with
// an error naming both topics and the fix, before taking a record of any topic.
func TestMissingDeadLetterTopicRefusesToStart(t *testing.T) {
	brokers, _ := testenv.Kafka(t, 1, "orders", "refunds", "refunds.dlq")
	store, _ := newStore(t)
	produceRaw(t, brokers, eventRecord("orders", "o1"), eventRecord("refunds", "r1"))
	var runs atomic.Int32
	c, err := kafka.NewTyped(store, groupOpts(brokers, "shop", "orders", "refunds"), decodeEvent,
		func(context.Context, event, *kgo.Record) (string, error) { runs.Add(1); return "ok", nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		cancel()
		<-done
		t.Fatalf("Run went on consuming (%d handler runs) instead of refusing", runs.Load())
	}
	var dlqErr *kafka.DeadLetterTopicError
	if !errors.Is(err, kafka.ErrNoDeadLetterTopic) || !errors.As(err, &dlqErr) {
		t.Fatalf("Run returned %v, want a *DeadLetterTopicError matching ErrNoDeadLetterTopic", err)
	}
	if dlqErr.Topic != "orders" || dlqErr.DeadLetter != "orders.dlq" || strings.Contains(err.Error(), "refunds") ||
		!strings.Contains(err.Error(), `"orders.dlq"`) || !strings.Contains(err.Error(), "WithCreateDeadLetterTopics") {
		t.Fatalf("Run returned %q: want it to name orders.dlq of orders (only) and WithCreateDeadLetterTopics", err)
	}
	if runs.Load() != 0 {
		t.Fatalf("%d handler runs before Run refused, want 0", runs.Load())
	}
	for _, topic := range []string{"orders", "refunds"} {
		if l, _ := lag(t, brokers, "shop", topic); l != 1 {
			t.Fatalf("%s: lag %d, want 1 (nothing committed)", topic, l)
		}
	}
}

// WithCreateDeadLetterTopics creates a missing dead-letter topic at the start,
// and a poison record's copy lands in it.
func TestCreateDeadLetterTopics(t *testing.T) {
	brokers, _ := testenv.Kafka(t, 2, "orders")
	store, _ := newStore(t)
	produceRaw(t, brokers, eventRecord("orders", "poison"), eventRecord("orders", "fine"))
	var runs atomic.Int32
	logs := &logWatch{}
	c, err := kafka.NewTyped(store, groupOpts(brokers, "shop", "orders"), decodeEvent,
		func(_ context.Context, ev event, _ *kgo.Record) (string, error) {
			runs.Add(1)
			if ev.ID == "poison" {
				return "", consumer.Permanent(errors.New("unknown product"))
			}
			return "ok", nil
		}, kafka.WithCreateDeadLetterTopics(3, -1), kafka.WithLogger(logs.logger()))
	if err != nil {
		t.Fatal(err)
	}
	startMember(t, c)
	testenv.Eventually(t, 30*time.Second, "every offset committed", func() bool {
		l, _ := lag(t, brokers, "shop", "orders")
		return l == 0
	})
	if parts := topicPartitions(t, brokers, "orders.dlq"); parts != 3 {
		t.Fatalf("orders.dlq has %d partitions, want the 3 asked for", parts)
	}
	dead := dlqRecords(t, brokers, "orders.dlq")
	if runs.Load() != 2 || len(dead) != 1 || header(dead[0], kafka.HeaderKey) != "poison" {
		t.Fatalf("%d handler runs, %d dead letters; want 2 runs and the poison record's copy", runs.Load(), len(dead))
	}
	if created := logs.find(slog.LevelInfo, "kafka: dead-letter topic created dlq=orders.dlq"); len(created) != 1 {
		t.Fatalf("creation logged %d times, want once", len(created))
	}
}

// A dead-letter topic the broker refuses to create: Run refuses to start with the
// broker's reason and what to do.
func TestDeadLetterTopicCreationRefused(t *testing.T) {
	brokers, cluster := testenv.Kafka(t, 1, "orders")
	if cluster == nil {
		t.Skip("refusing a CreateTopics request needs the in-process kfake cluster")
	}
	cluster.ControlKey(int16(kmsg.CreateTopics), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r := req.(*kmsg.CreateTopicsRequest)
		resp := r.ResponseKind().(*kmsg.CreateTopicsResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewCreateTopicsResponseTopic()
			st.Topic, st.ErrorCode = rt.Topic, kerr.TopicAuthorizationFailed.Code
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	store, _ := newStore(t)
	c, err := kafka.New(store, groupOpts(brokers, "shop", "orders"),
		func(context.Context, *kgo.Record) (string, error) { return "ok", nil }, kafka.WithCreateDeadLetterTopics(1, 1))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = c.Run(ctx)
	var dlqErr *kafka.DeadLetterTopicError
	if !errors.As(err, &dlqErr) || !errors.Is(err, kerr.TopicAuthorizationFailed) || dlqErr.DeadLetter != "orders.dlq" ||
		!strings.Contains(err.Error(), "could not be created") {
		t.Fatalf("Run returned %v, want orders.dlq refused for creation with the broker's reason", err)
	}
	if topicPartitions(t, brokers, "orders.dlq") != 0 {
		t.Fatal("orders.dlq exists")
	}
}

// With kgo.ConsumeRegex, a topic that appears later is checked when its
// partitions are first assigned: without a dead-letter topic it is stopped (an
// error logged, the store's observers told: consumer.PauseHook) and none of its
// records runs, while the other topics go on; it resumes once its dead-letter
// topic exists. A dead-letter topic the patterns would consume is refused (and not
// created).
func TestRegexTopicWithoutDeadLetterTopicStops(t *testing.T) {
	brokers, _ := testenv.Kafka(t, 1, "events.a", "events.a.dlq")
	stops := newStopWatch()
	store, _ := newStore(t, consumer.WithObserver(stops))
	var mu sync.Mutex
	runs := map[string]int{}
	handler := func(_ context.Context, ev event, rec *kgo.Record) (string, error) {
		mu.Lock()
		runs[rec.Topic+"/"+ev.ID]++
		mu.Unlock()
		if ev.ID == "poison" {
			return "", consumer.Permanent(errors.New("unknown event type"))
		}
		return "ok", nil
	}
	ran := func(key string) int {
		mu.Lock()
		defer mu.Unlock()
		return runs[key]
	}
	logs := &logWatch{}
	opts := append(groupOpts(brokers, "events-svc", `^events\.[a-z]+$`), kgo.ConsumeRegex(),
		kgo.MetadataMinAge(50*time.Millisecond), kgo.MetadataMaxAge(200*time.Millisecond)) // find new topics quickly
	c, err := kafka.NewTyped(store, opts, decodeEvent, handler, kafka.WithLogger(logs.logger()))
	if err != nil {
		t.Fatal(err)
	}
	startMember(t, c)
	produceRaw(t, brokers, eventRecord("events.a", "a1"))
	testenv.Eventually(t, 30*time.Second, "events.a consumed", func() bool { return ran("events.a/a1") == 1 })

	createTopic(t, brokers, "events.b")
	produceRaw(t, brokers, eventRecord("events.b", "b1"), eventRecord("events.b", "poison"))
	var stop stopEvent
	select {
	case stop = <-stops.stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("events.b was never stopped")
	}
	var dlqErr *kafka.DeadLetterTopicError
	if stop.topic != "events.b" || !errors.Is(stop.err, kafka.ErrNoDeadLetterTopic) || !errors.As(stop.err, &dlqErr) ||
		dlqErr.DeadLetter != "events.b.dlq" {
		t.Fatalf("stopped %q with %v, want events.b for its missing events.b.dlq", stop.topic, stop.err)
	}
	if lines := logs.find(slog.LevelError, "kafka: topic stopped"); len(lines) != 1 || !strings.Contains(lines[0], "dlq=events.b.dlq") {
		t.Fatalf("error log lines %q, want one naming events.b.dlq", lines)
	}
	// The member goes on with the other topics; events.b stays untouched.
	produceRaw(t, brokers, eventRecord("events.a", "a2"))
	testenv.Eventually(t, 30*time.Second, "events.a consumed after the stop", func() bool { return ran("events.a/a2") == 1 })
	if n := ran("events.b/b1") + ran("events.b/poison"); n != 0 {
		t.Fatalf("%d records of the stopped topic ran", n)
	}
	if l, _ := lag(t, brokers, "events-svc", "events.b"); l != 2 {
		t.Fatalf("events.b: lag %d, want 2 (nothing committed while stopped)", l)
	}

	createTopic(t, brokers, "events.b.dlq")
	select {
	case topic := <-stops.resumed:
		if topic != "events.b" {
			t.Fatalf("resumed %q, want events.b", topic)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("events.b never resumed after its dead-letter topic was created")
	}
	testenv.Eventually(t, 30*time.Second, "events.b committed", func() bool {
		l, _ := lag(t, brokers, "events-svc", "events.b")
		return l == 0
	})
	dead := dlqRecords(t, brokers, "events.b.dlq")
	if ran("events.b/b1") != 1 || ran("events.b/poison") != 1 || len(dead) != 1 || header(dead[0], kafka.HeaderKey) != "poison" {
		t.Fatalf("events.b runs: b1 %d, poison %d; %d dead letters; want 1, 1 and the poison's copy",
			ran("events.b/b1"), ran("events.b/poison"), len(dead))
	}
}

// With kgo.ConsumeRegex and WithCreateDeadLetterTopics, a new topic's dead-letter
// topic is created at its first assignment, unless the patterns would consume it.
func TestRegexCreatesDeadLetterTopicsOutsideThePatterns(t *testing.T) {
	brokers, _ := testenv.Kafka(t, 1, "jobs.a")
	stops := newStopWatch()
	store, _ := newStore(t, consumer.WithObserver(stops))
	var runs atomic.Int32
	for _, tc := range []struct {
		pattern, topic string
		stopped        bool
	}{
		{`^jobs\.[a-z]+$`, "jobs.a", false},
		{`^tasks\..*$`, "tasks.b", true}, // tasks.b.dlq would be consumed: refused, not created
	} {
		if tc.stopped {
			createTopic(t, brokers, tc.topic)
		}
		opts := append(groupOpts(brokers, "jobs-"+tc.topic, tc.pattern), kgo.ConsumeRegex())
		c, err := kafka.NewTyped(store, opts, decodeEvent, func(context.Context, event, *kgo.Record) (string, error) {
			runs.Add(1)
			return "", consumer.Permanent(errors.New("no worker for it"))
		}, kafka.WithCreateDeadLetterTopics(1, -1))
		if err != nil {
			t.Fatal(err)
		}
		produceRaw(t, brokers, eventRecord(tc.topic, "job-1"))
		m := startMember(t, c)
		if !tc.stopped {
			testenv.Eventually(t, 30*time.Second, tc.topic+" committed", func() bool {
				l, _ := lag(t, brokers, "jobs-"+tc.topic, tc.topic)
				return l == 0
			})
			if dead := dlqRecords(t, brokers, tc.topic+".dlq"); len(dead) != 1 || runs.Load() != 1 {
				t.Fatalf("%s: %d runs, %d dead letters in the created topic; want 1 and 1", tc.topic, runs.Load(), len(dead))
			}
			m.stop()
			continue
		}
		select {
		case stop := <-stops.stopped:
			if stop.topic != tc.topic || !errors.Is(stop.err, kafka.ErrConfig) || !strings.Contains(stop.err.Error(), "ConsumeRegex") {
				t.Fatalf("stopped %q with %v, want %s refused for a dead-letter topic its pattern matches", stop.topic, stop.err, tc.topic)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s was never stopped", tc.topic)
		}
		if topicPartitions(t, brokers, tc.topic+".dlq") != 0 || runs.Load() != 1 {
			t.Fatalf("%s.dlq was created, or %s ran (%d runs in all)", tc.topic, tc.topic, runs.Load())
		}
	}
}

var _ consumer.PauseHook = (*stopWatch)(nil)

type stopEvent struct {
	topic string
	err   error
}

// stopWatch hands a test the topics a consumer stopped and resumed.
type stopWatch struct {
	stopped chan stopEvent
	resumed chan string
}

func newStopWatch() *stopWatch {
	return &stopWatch{stopped: make(chan stopEvent, 4), resumed: make(chan string, 4)}
}

func (w *stopWatch) OnPause(e consumer.PauseEvent)  { w.stopped <- stopEvent{e.Topic, e.Err} }
func (w *stopWatch) OnResume(e consumer.PauseEvent) { w.resumed <- e.Topic }

func createTopic(t *testing.T, brokers []string, topic string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
}

// topicPartitions returns how many partitions topic has; 0 when it does not exist.
func topicPartitions(t *testing.T, brokers []string, topic string) int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	td, err := kadm.NewClient(cl).ListTopics(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	d, ok := td[topic]
	if !ok || d.Err != nil {
		return 0
	}
	return len(d.Partitions)
}
