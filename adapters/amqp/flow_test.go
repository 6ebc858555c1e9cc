package amqp_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	idemamqp "github.com/idemkit/idemkit/adapters/amqp"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
)

// Redis refuses every connection for 20 seconds in the middle of a run: no
// delivery is dead-lettered (an outage is not an attempt), and once Redis is back
// every order is fulfilled exactly once. The lease (60s) outlasts the outage, so
// the handlers that finished as it began keep their claims and have their
// completions recorded once Redis is back (the worker holds those deliveries
// meanwhile instead of churning them). A store that stays down is covered by
// TestBadInput: its deliveries cycle through the retry queue, never dead-lettered.
func TestRedisOutageDeadLettersNothing(t *testing.T) {
	url := testenv.AMQP(t)
	proxy := testenv.NewFaultProxy(t, testenv.RedisAddr(t))
	direct := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	via := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = via.Close() })
	hooks := &counters{}
	store, err := redisstore.NewStore(via, consumer.WithPrefix(prefix), consumer.WithScope("fulfilment"),
		consumer.WithLease(time.Minute), consumer.WithCallTimeout(500*time.Millisecond), consumer.WithObserver(hooks))
	if err != nil {
		t.Fatal(err)
	}
	book := testenv.NewLedger(direct, prefix)
	topo := topology(t, url, false)
	orders := publish(t, url, topo.Queue, 400, 0.2)
	slow := func(ctx context.Context, o order, d amqp091.Delivery) (string, error) {
		time.Sleep(20 * time.Millisecond) // the run spans the outage
		return fulfil(book)(ctx, o, d)
	}
	w, err := idemamqp.NewTypedWorker(store, url, topo, decodeOrder, slow, idemamqp.WithPrefetch(4))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, w)
	testenv.Eventually(t, 30*time.Second, "a quarter of the orders", func() bool { return book.Total(t) >= 100 })
	proxy.Refuse()
	down := book.Total(t)
	time.Sleep(20 * time.Second)
	if book.Total(t) > down+4 { // at most the handlers running as it began (the prefetch)
		t.Fatalf("%d orders fulfilled during the outage", book.Total(t)-down)
	}
	proxy.Pass()
	testenv.Eventually(t, 60*time.Second, "every order fulfilled", func() bool { return book.Total(t) == len(orders) })
	testenv.Eventually(t, 30*time.Second, "the queue drained", func() bool {
		return hooks.outcomes[consumer.Success].Load()+hooks.outcomes[consumer.Duplicate].Load() == 480
	})
	r.stop()
	checkExactlyOnce(t, book, orders)
	if hooks.dead.Load() != 0 || len(drain(t, url, topo.DeadLetterQueue)) != 0 {
		t.Fatalf("%d dead letters during a 20s outage, want 0", hooks.dead.Load())
	}
	t.Logf("%d deliveries cycled through the retry queue during the outage", hooks.retries.Load())
}

// A permanent failure with a 1.1 MB error text: its dead-letter copy carries the
// error cut to 4 KiB and the kind, the worker never reconnects, and the healthy
// message beside it is fulfilled and acked.
func TestLargeErrorIsCappedInTheDeadLetter(t *testing.T) {
	url := testenv.AMQP(t)
	hooks := &counters{}
	store, book, _ := newStore(t, consumer.WithObserver(hooks))
	topo := topology(t, url, false)
	handler := func(ctx context.Context, o order, d amqp091.Delivery) (string, error) {
		if o.ID == "poison" {
			return "", consumer.Permanent(errors.New(strings.Repeat("trace line\n", 100_000)))
		}
		return fulfil(book)(ctx, o, d)
	}
	w, err := idemamqp.NewTypedWorker(store, url, topo, decodeOrder, handler)
	if err != nil {
		t.Fatal(err)
	}
	publishRaw(t, url, topo.Queue,
		amqp091.Publishing{MessageId: "poison", Body: []byte(`{"id":"poison","items":1}`)},
		amqp091.Publishing{MessageId: "ok", Body: []byte(`{"id":"ok","items":1}`)})
	r := start(t, w)
	testenv.Eventually(t, 10*time.Second, "the dead letter and the good order", func() bool {
		return hooks.dead.Load() == 1 && hooks.outcomes[consumer.Success].Load() == 1
	})
	r.stop()
	dead := drain(t, url, topo.DeadLetterQueue)
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	reason, _ := dead[0].Headers[idemamqp.HeaderReason].(string)
	if len(reason) > idemamqp.MaxErrorHeader || !strings.Contains(reason, "cut from") ||
		dead[0].Headers[idemamqp.HeaderKind] != "PERMANENT" || string(dead[0].Body) != `{"id":"poison","items":1}` {
		t.Fatalf("dead letter: reason of %d bytes, kind %v, body %q", len(reason), dead[0].Headers[idemamqp.HeaderKind], dead[0].Body)
	}
	if hooks.reconnects.Load() != 0 {
		t.Fatalf("%d reconnects, want 0", hooks.reconnects.Load())
	}
	if left := drain(t, url, topo.Queue); len(left) != 0 {
		t.Fatalf("%d deliveries left in the work queue", len(left))
	}
	counts, _ := book.Counts(t)
	if counts["ok"] != 1 {
		t.Fatalf("ok fulfilled %d times", counts["ok"])
	}
}

// A delivery whose own headers are too large to copy into a dead letter (100 KB)
// is dead-lettered body-less with its key and kind, without a reconnect.
func TestBodyLessDeadLetter(t *testing.T) {
	url := testenv.AMQP(t)
	hooks := &counters{}
	store, _, _ := newStore(t, consumer.WithObserver(hooks))
	topo := topology(t, url, false)
	w, err := idemamqp.NewTypedWorker(store, url, topo, decodeOrder,
		func(ctx context.Context, o order, d amqp091.Delivery) (string, error) {
			return "", consumer.Permanent(errors.New("rejected"))
		})
	if err != nil {
		t.Fatal(err)
	}
	publishRaw(t, url, topo.Queue, amqp091.Publishing{MessageId: "fat", Body: []byte(`{"id":"fat","items":1}`),
		Headers: amqp091.Table{"trace-blob": strings.Repeat("t", 100_000)}})
	r := start(t, w)
	testenv.Eventually(t, 10*time.Second, "the dead letter", func() bool { return hooks.dead.Load() == 1 })
	r.stop()
	dead := drain(t, url, topo.DeadLetterQueue)
	if len(dead) != 1 || dead[0].Headers[idemamqp.HeaderBodyLess] != "true" || len(dead[0].Body) != 0 ||
		dead[0].Headers[idemamqp.HeaderKey] != "fat" || dead[0].Headers[idemamqp.HeaderKind] != "PERMANENT" ||
		dead[0].Headers["trace-blob"] != nil {
		t.Fatalf("dead letters %d: %v", len(dead), dead)
	}
	if hooks.reconnects.Load() != 0 {
		t.Fatalf("%d reconnects", hooks.reconnects.Load())
	}
}
