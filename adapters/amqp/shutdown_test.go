package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	idemamqp "github.com/idemkit/idemkit/adapters/amqp"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// A graceful shutdown while every handler is finishing: 20 permanent failures and
// 20 retryable ones. Within the grace, each dead-letter and retry copy is confirmed
// and its original acked before Run returns, so nothing is both copied and put back:
// exactly 20 dead letters, exactly 20 messages back on the work queue (the retry
// copies, once their delay ran out), 40 handler runs. A second worker then runs the
// 20 retried messages once each, and the dead-lettered ones never again.
func TestShutdownFinishesTheCopiesItStarted(t *testing.T) {
	url := testenv.AMQP(t)
	stores, book, _ := newStores(t)
	store := stores()
	topo := topology(t, url, false)
	const n = 40
	orders := publish(t, url, topo.Queue, n, 0)
	gate := make(chan struct{})
	var runs atomic.Int32
	handler := func(ctx context.Context, o order, d amqp091.Delivery) (string, error) {
		runs.Add(1)
		<-gate
		if id, _ := strconv.Atoi(o.ID[len("ord-"):]); id%2 == 0 {
			return "", consumer.Permanent(errors.New("card declined"))
		}
		return "", errors.New("warehouse API timed out")
	}
	w, err := idemamqp.NewTypedWorker(store, url, topo, decodeOrder, handler, idemamqp.WithPrefetch(64),
		idemamqp.WithShutdownGrace(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, w)
	testenv.Eventually(t, 20*time.Second, "every handler running", func() bool { return runs.Load() == n })
	r.cancel()
	// The handlers finish once the worker has cancelled its consumer: their copies
	// are made while it shuts down.
	testenv.Eventually(t, 20*time.Second, "the consumer cancelled", func() bool { return consumers(t, url, topo.Queue) == 0 })
	close(gate)
	waitRun(t, r, time.Minute)

	testenv.Eventually(t, 20*time.Second, "the retry copies back on the work queue", func() bool {
		return retryDepth(t, url, topo) == 0
	})
	if dead, back := depth(t, url, topo.DeadLetterQueue), depth(t, url, topo.Queue); dead != n/2 || back != n/2 || runs.Load() != n {
		t.Fatalf("after shutdown: %d dead letters, %d on the work queue, %d handler runs; want %d, %d, %d",
			dead, back, runs.Load(), n/2, n/2, n)
	}

	hooks := &counters{} // the second worker's own store, on the same records
	w2, err := idemamqp.NewTypedWorker(stores(consumer.WithObserver(hooks)), url, topo, decodeOrder, fulfil(book))
	if err != nil {
		t.Fatal(err)
	}
	r2 := start(t, w2)
	testenv.Eventually(t, 20*time.Second, "the retried orders fulfilled", func() bool { return book.Total(t) == n/2 })
	r2.stop()
	counts, _ := book.Counts(t)
	for i, o := range orders {
		if want := i % 2; counts[o.ID] != want {
			t.Errorf("order %s fulfilled %d times, want %d", o.ID, counts[o.ID], want)
		}
	}
	if s, dup, dead := hooks.outcomes[consumer.Success].Load(), hooks.outcomes[consumer.Duplicate].Load(), depth(t, url, topo.DeadLetterQueue); s != n/2 || dup != 0 || dead != n/2 {
		t.Fatalf("second worker: %d SUCCESS, %d DUPLICATE, %d dead letters; want %d, 0, %d", s, dup, dead, n/2, n/2)
	}
}

// A grace too short for the copies: the broker's replies are slowed (a fault proxy
// between the worker and the broker), and 40 permanent failures finish as the
// worker shuts down. Whatever is cut by the end of the grace is released whole:
// every message is either in the dead-letter queue (its copy confirmed and its
// original acked) or back on the work queue (no copy made), never both.
func TestShutdownGraceReleasesUnfinishedCopiesWhole(t *testing.T) {
	url := testenv.AMQP(t)
	proxy, viaProxy := amqpProxy(t, url)
	store, _, _ := newStore(t)
	topo := topology(t, url, false)
	const n = 40
	publish(t, url, topo.Queue, n, 0)
	gate := make(chan struct{})
	var runs atomic.Int32
	w, err := idemamqp.NewTypedWorker(store, viaProxy, topo, decodeOrder,
		func(ctx context.Context, o order, d amqp091.Delivery) (string, error) {
			runs.Add(1)
			<-gate
			return "", consumer.Permanent(errors.New("card declined"))
		}, idemamqp.WithPrefetch(64), idemamqp.WithShutdownGrace(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, w)
	testenv.Eventually(t, 20*time.Second, "every handler running", func() bool { return runs.Load() == n })
	// Every copy now waits 2 x 50ms for its confirm, one after the other: 40 of them
	// cannot be made in the grace.
	proxy.SetDelay(50 * time.Millisecond)
	r.cancel()
	testenv.Eventually(t, 20*time.Second, "the consumer cancelled", func() bool { return consumers(t, url, topo.Queue) == 0 })
	close(gate)
	waitRun(t, r, time.Minute)

	dead, back := drain(t, url, topo.DeadLetterQueue), drain(t, url, topo.Queue)
	seen := map[string]string{}
	for _, d := range dead {
		seen[d.MessageId] = "dead-lettered"
	}
	for _, d := range back {
		if seen[d.MessageId] != "" {
			t.Errorf("order %s both dead-lettered and back on the work queue", d.MessageId)
		}
		seen[d.MessageId] = "back"
	}
	t.Logf("%d dead-lettered in the grace, %d back on the work queue", len(dead), len(back))
	if len(dead)+len(back) != n || len(seen) != n || len(back) == 0 || runs.Load() != n {
		t.Fatalf("%d dead letters + %d back on the work queue for %d distinct orders (%d handler runs); want %d orders, each once, some cut by the grace",
			len(dead), len(back), len(seen), runs.Load(), n)
	}
}

// consumers is the number of consumers of queue.
func consumers(t *testing.T, url, queue string) int {
	t.Helper()
	conn := dial(t, url)
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("inspect %s: %v", queue, err)
	}
	return q.Consumers
}

// retryDepth is the number of messages waiting in topo's retry queues.
func retryDepth(t *testing.T, url string, topo idemamqp.Topology) int {
	t.Helper()
	total := 0
	for _, d := range topo.RetryDelays {
		total += depth(t, url, topo.RetryQueue(d))
	}
	return total
}

// waitRun waits for r's Run to return, failing t after within.
func waitRun(t *testing.T, r *running, within time.Duration) {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(within):
		t.Fatalf("Run did not return within %v of the cancellation", within)
	}
}

// amqpProxy starts a fault proxy in front of the broker at url and returns it with
// the URL that reaches the broker through it.
func amqpProxy(t *testing.T, url string) (*testenv.FaultProxy, string) {
	t.Helper()
	u, err := amqp091.ParseURI(url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewFaultProxy(t, net.JoinHostPort(u.Host, strconv.Itoa(u.Port)))
	host, port, _ := net.SplitHostPort(proxy.Addr())
	u.Host = host
	u.Port, _ = strconv.Atoi(port)
	return proxy, fmt.Sprint(u)
}
