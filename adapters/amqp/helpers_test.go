package amqp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"testing"
	"time"

	idemamqp "github.com/idemkit/idemkit/adapters/amqp"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

func TestMain(m *testing.M) {
	if helperMain() {
		return
	}
	testenv.Run(m)
}

type order struct {
	ID    string `json:"id"`
	Items int    `json:"items"`
}

// topology returns a topology with queue names of t's own, deleted when t ends.
func topology(t *testing.T, url string, quorum bool) idemamqp.Topology {
	t.Helper()
	queue := fmt.Sprintf("idemkit-test-%s-%04x", t.Name(), rand.N(1<<16))
	topo := idemamqp.Topology{
		Queue:           queue,
		DeadLetterQueue: queue + ".dlq",
		Quorum:          quorum,
		RetryDelays:     []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond},
	}
	conn := dial(t, url)
	if err := topo.Declare(conn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := amqp091.Dial(url)
		if err == nil {
			_ = topo.Delete(c)
			_ = c.Close()
		}
	})
	return topo
}

func dial(t *testing.T, url string) *amqp091.Connection {
	t.Helper()
	conn, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// publish sends orders to queue with their id as MessageId, the first dupShare of
// them twice, shuffled; it returns the distinct orders.
func publish(t *testing.T, url, queue string, n int, dupShare float64) []order {
	t.Helper()
	orders := make([]order, n)
	for i := range orders {
		orders[i] = order{ID: fmt.Sprintf("ord-%05d", i), Items: 1 + i%5}
	}
	stream := append([]order(nil), orders...)
	stream = append(stream, orders[:int(float64(n)*dupShare)]...)
	rand.Shuffle(len(stream), func(i, j int) { stream[i], stream[j] = stream[j], stream[i] })
	conn := dial(t, url)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var pending []*amqp091.DeferredConfirmation
	for _, o := range stream {
		body, _ := json.Marshal(o)
		c, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false,
			amqp091.Publishing{MessageId: o.ID, ContentType: "application/json", DeliveryMode: amqp091.Persistent, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, c)
	}
	for _, c := range pending {
		if ok, err := c.WaitContext(ctx); err != nil || !ok {
			t.Fatalf("publish not confirmed: %v", err)
		}
	}
	return orders
}

func publishRaw(t *testing.T, url, queue string, msgs ...amqp091.Publishing) {
	t.Helper()
	ch, err := dial(t, url).Channel()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if err := ch.PublishWithContext(context.Background(), "", queue, false, false, m); err != nil {
			t.Fatal(err)
		}
	}
}

// depth is the number of ready messages in queue.
func depth(t *testing.T, url, queue string) int {
	t.Helper()
	conn, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("inspect %s: %v", queue, err)
	}
	return q.Messages
}

// drain takes every message from queue.
func drain(t *testing.T, url, queue string) []amqp091.Delivery {
	t.Helper()
	ch, err := dial(t, url).Channel()
	if err != nil {
		t.Fatal(err)
	}
	var out []amqp091.Delivery
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

func newStore(t *testing.T, opts ...consumer.Option) (consumer.Store, *testenv.Ledger, string) {
	t.Helper()
	mk, book, prefix := newStores(t, opts...)
	return mk(), book, prefix
}

// newStores returns a maker of stores that share one set of records (one Redis,
// one prefix, scope "fulfilment", opts), each with the options it is given
// besides: workers observed apart each get a store of their own.
func newStores(t *testing.T, opts ...consumer.Option) (func(...consumer.Option) consumer.Store, *testenv.Ledger, string) {
	t.Helper()
	c := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	mk := func(more ...consumer.Option) consumer.Store {
		t.Helper()
		all := append([]consumer.Option{consumer.WithPrefix(prefix), consumer.WithScope("fulfilment")}, opts...)
		s, err := redisstore.NewStore(c, append(all, more...)...)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	return mk, testenv.NewLedger(c, prefix), prefix
}

func decodeOrder(d amqp091.Delivery) (order, error) {
	var o order
	if err := json.Unmarshal(d.Body, &o); err != nil {
		return o, err
	}
	if o.ID == "" {
		return o, fmt.Errorf("order without id")
	}
	return o, nil
}

func fulfil(book *testenv.Ledger) func(ctx context.Context, o order, d amqp091.Delivery) (string, error) {
	return func(ctx context.Context, o order, d amqp091.Delivery) (string, error) {
		if _, err := book.Apply(ctx, o.ID); err != nil {
			return "", err
		}
		return "shipment-" + o.ID, nil
	}
}

type running struct {
	cancel context.CancelFunc
	done   chan error
}

func start[V, T any](t *testing.T, w *idemamqp.Worker[V, T]) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

func (r *running) stop() {
	r.cancel()
	err := <-r.done
	r.done <- err
}

func haveRabbitmqctl() bool {
	_, err := exec.LookPath("rabbitmqctl")
	return err == nil && os.Getenv("IDEMKIT_AMQP_URL") == ""
}
