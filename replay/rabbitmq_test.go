package replay_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/replay"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// rabbit is a connection and a channel to the test broker, with queues of the
// test's own names that are deleted at the end.
type rabbit struct {
	t    *testing.T
	conn *amqp091.Connection
	ch   *amqp091.Channel
	pre  string
}

func newRabbit(t *testing.T) *rabbit {
	t.Helper()
	conn, err := amqp091.Dial(testenv.AMQP(t))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	r := &rabbit{t: t, conn: conn, ch: ch, pre: strings.ReplaceAll(testenv.Prefix(t), ":", "-")}
	t.Cleanup(func() { _ = conn.Close() })
	return r
}

// queue declares a durable queue named after the test and deletes it at the end.
func (r *rabbit) queue(name string) string {
	r.t.Helper()
	q := r.pre + "." + name
	if _, err := r.ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _, _ = r.ch.QueueDelete(q, false, false, false) })
	return q
}

func (r *rabbit) publish(queue string, p amqp091.Publishing) {
	r.t.Helper()
	if err := r.ch.PublishWithContext(context.Background(), "", queue, false, false, p); err != nil {
		r.t.Fatal(err)
	}
}

// depth is the number of ready messages in queue, once the broker has settled
// (a closed consumer's messages back, acks applied).
func (r *rabbit) depth(queue string, want int) {
	r.t.Helper()
	var got int
	testenv.Eventually(r.t, 10*time.Second, fmt.Sprintf("%s holds %d messages", queue, want), func() bool {
		q, err := r.ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		if err != nil {
			r.t.Fatal(err)
		}
		got = q.Messages
		return got == want
	})
}

func orderKey(i int) consumer.Key { return consumer.Key(fmt.Sprintf("order-%05d", i)) }

// body is the message of an order.
func body(k consumer.Key) []byte { return []byte(`{"order":"` + string(k) + `"}`) }

// complete records keys as completed in store with their payloads, as the live
// consumer would have.
func complete(t *testing.T, store consumer.Store, keys []consumer.Key, payload func(consumer.Key) []byte) {
	t.Helper()
	for _, k := range keys {
		r := consumer.ExecuteIdempotently(context.Background(), store, k, payload(k), func(context.Context) (string, error) { return "done", nil })
		if r.Err != nil || r.Outcome != consumer.Success {
			t.Fatalf("record %s: %v %v", k, r.Outcome, r.Err)
		}
	}
}

// A queue of 100 messages of which 60 were processed: the plan takes nothing off
// the queue; execution runs the 40 others exactly once, acks every message whose
// effect is recorded and leaves the 5 that fail for good in the queue.
func TestRabbitMQQueueReplay(t *testing.T) {
	r := newRabbit(t)
	q := r.queue("orders")
	store := redisStore(t)
	var done []consumer.Key
	for i := range 100 {
		r.publish(q, amqp091.Publishing{MessageId: string(orderKey(i)), Body: body(orderKey(i))})
		if i < 60 {
			done = append(done, orderKey(i))
		}
	}
	complete(t, store, done, body)
	r.depth(q, 100)
	ctx := context.Background()

	src, err := replay.OpenRabbitMQ(r.conn, q, replay.RabbitIdle(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := replay.Plan(ctx, store, src)
	_ = src.Close()
	if err != nil {
		t.Fatal(err)
	}
	if plan.Messages != 100 || plan.Counts[replay.Unseen] != 40 || plan.Counts[replay.Duplicate] != 60 {
		t.Fatalf("plan: %d messages, counts %v; want 40 NEW, 60 DUPLICATE", plan.Messages, plan.Counts)
	}
	r.depth(q, 100)

	src, err = replay.OpenRabbitMQ(r.conn, q, replay.RabbitIdle(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := replay.Execute(ctx, store, src, func(context.Context, replay.Message) (string, error) { return "", nil },
		replay.WithCheckpoint(replay.FileCheckpoint(t.TempDir()+"/cp.json"))); !errors.Is(err, replay.ErrConfig) {
		t.Fatalf("a queue with a checkpoint: %v, want ErrConfig", err)
	}
	runs := runs{byKey: map[consumer.Key]int{}}
	rep, err := replay.Execute(ctx, store, src, func(_ context.Context, m replay.Message) (string, error) {
		runs.add(m.Key)
		if m.Key >= orderKey(95) {
			return "", consumer.Permanent(errors.New("card expired"))
		}
		return "charged", nil
	})
	_ = src.Close()
	if err != nil {
		t.Fatal(err)
	}
	if got := runs.total.Load(); got != 40 {
		t.Fatalf("handler runs %d, want 40", got)
	}
	if maxRuns(&runs) != 1 {
		t.Fatalf("a key ran %d times", maxRuns(&runs))
	}
	if rep.Counts[replay.Ran] != 35 || rep.Counts[replay.Failed] != 5 || rep.Counts[replay.Duplicate] != 60 {
		t.Fatalf("counts %v: want 35 RAN, 5 FAILED, 60 DUPLICATE", rep.Counts)
	}
	r.depth(q, 5) // the five failed ones stay in the queue
}

// deadLetter publishes to dlq the copy the RabbitMQ worker makes of a message
// that failed for good in queue.
func (r *rabbit) deadLetter(dlq, queue string, key consumer.Key, extra amqp091.Table) {
	h := amqp091.Table{"x-idemkit-key": string(key), "x-idemkit-original-queue": queue,
		"x-idemkit-original-exchange": "", "x-idemkit-original-routing-key": queue,
		"x-idemkit-kind": "PERMANENT", "x-idemkit-outcome": "ERROR", "x-idemkit-reason": "card expired",
		"x-idemkit-attempts": int32(1), "tenant": "acme"}
	for k, v := range extra {
		h[k] = v
	}
	r.publish(dlq, amqp091.Publishing{MessageId: string(key), Headers: h, ContentType: "application/json",
		Body: body(key)})
}

// A dead-letter queue of 100 poison messages: a plan moves nothing; once the bug
// is fixed, a redrive with Rerun moves each copy back to its work queue, where it
// runs exactly once more; a second redrive finds nothing.
func TestRedriveRabbitMQWithRerun(t *testing.T) {
	r := newRabbit(t)
	q, dlq := r.queue("orders"), r.queue("orders.dlq")
	store := redisStore(t)
	ctx := context.Background()
	for i := range 100 {
		res := consumer.ExecuteIdempotently(ctx, store, orderKey(i), body(orderKey(i)), func(context.Context) (string, error) {
			return "", consumer.Permanent(errors.New("card expired"))
		})
		if res.Outcome != consumer.Error {
			t.Fatalf("poison run: %v", res.Outcome)
		}
		r.deadLetter(dlq, q, orderKey(i), nil)
	}
	r.depth(dlq, 100)
	open := func() *replay.RabbitSource {
		src, err := replay.OpenRabbitMQ(r.conn, dlq, replay.RabbitIdle(500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = src.Close() })
		return src
	}

	src := open()
	rep, err := replay.RedriveRabbitMQ(ctx, store, src, r.conn, replay.RedriveOptions{})
	_ = src.Close()
	if err != nil || rep.Counts[replay.NotRerunnable] != 100 || rep.Kinds["PERMANENT"] != 100 {
		t.Fatalf("plan without rerun: %v %+v", err, rep)
	}
	src = open()
	rep, err = replay.RedriveRabbitMQ(ctx, store, src, r.conn, replay.RedriveOptions{Rerun: true})
	_ = src.Close()
	if err != nil || rep.Counts[replay.Redriven] != 100 {
		t.Fatalf("plan with rerun: %v %+v", err, rep)
	}
	r.depth(dlq, 100)
	r.depth(q, 0)

	src = open()
	rep, err = replay.RedriveRabbitMQ(ctx, store, src, r.conn, replay.RedriveOptions{Rerun: true, Execute: true, Actor: "oncall", Reason: "date parser fixed"})
	_ = src.Close()
	if err != nil || rep.Counts[replay.Redriven] != 100 || rep.Read != 100 {
		t.Fatalf("redrive: %v %+v", err, rep)
	}
	r.depth(dlq, 0)
	r.depth(q, 100)

	// What the work queue now holds: the original body and headers, no
	// dead-letter headers, a replay count of 1.
	runs := runs{byKey: map[consumer.Key]int{}}
	work, err := replay.OpenRabbitMQ(r.conn, q, replay.RabbitIdle(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	res, err := replay.Execute(ctx, store, work, func(_ context.Context, m replay.Message) (string, error) {
		runs.add(m.Key)
		for h := range m.Headers {
			if strings.HasPrefix(h, "x-idemkit-") {
				return "", consumer.Permanent(fmt.Errorf("dead-letter header %s redriven", h))
			}
		}
		if m.Headers["tenant"] != "acme" || m.Headers[replay.HeaderReplayCount] != "1" || string(m.Payload) != string(body(m.Key)) {
			return "", consumer.Permanent(fmt.Errorf("redriven copy changed: %v %q", m.Headers, m.Payload))
		}
		return "charged", nil
	})
	_ = work.Close()
	if err != nil || res.Counts[replay.Ran] != 100 {
		t.Fatalf("work queue run: %v %v %+v", err, res.Counts, res.Errors)
	}
	if runs.total.Load() != 100 || maxRuns(&runs) != 1 {
		t.Fatalf("handler runs %d (max per key %d), want 100 (1)", runs.total.Load(), maxRuns(&runs))
	}
	r.depth(q, 0)

	src = open()
	rep, err = replay.RedriveRabbitMQ(ctx, store, src, r.conn, replay.RedriveOptions{Rerun: true, Execute: true, Actor: "oncall", Reason: "again"})
	if err != nil || rep.Read != 0 {
		t.Fatalf("second redrive: %v %+v", err, rep)
	}
}

// A dead letter whose work queue is gone stays in the dead-letter queue, and the
// redrive says which queue is missing.
func TestRedriveRabbitMQMissingQueue(t *testing.T) {
	r := newRabbit(t)
	dlq := r.queue("orders.dlq")
	store := redisStore(t)
	r.deadLetter(dlq, r.pre+".gone", "order-1", nil)
	r.depth(dlq, 1)
	src, err := replay.OpenRabbitMQ(r.conn, dlq, replay.RabbitIdle(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_, err = replay.RedriveRabbitMQ(context.Background(), store, src, r.conn, replay.RedriveOptions{Execute: true})
	_ = src.Close()
	if err == nil || !strings.Contains(err.Error(), ".gone") {
		t.Fatalf("redrive to a missing queue: %v", err)
	}
	r.depth(dlq, 1)
	if _, err := replay.OpenRabbitMQ(r.conn, r.pre+".nothing-here"); err == nil {
		t.Fatal("a source over a missing queue opened")
	}
	if _, err := replay.OpenRabbitMQ(nil, "x"); !errors.Is(err, replay.ErrConfig) {
		t.Fatalf("nil connection: %v", err)
	}
}

// maxRuns is the most runs any one key had.
func maxRuns(r *runs) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := 0
	for _, n := range r.byKey {
		m = max(m, n)
	}
	return m
}
