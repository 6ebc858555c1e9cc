package amqp_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	idemamqp "github.com/idemkit/idemkit/adapters/amqp"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/memory"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// A running worker keeps the deliveries it has finished only as long as the
// engine's current handler contexts refer to them: a handler context outlives its
// delivery (a handler may keep it, and the engine allocates them in slabs), and a
// finished delivery must not keep older ones alive through it. Here 2,000
// deliveries go through the worker; once all are acked, at most a fifth of them
// may be left after a collection.
func TestFinishedDeliveriesAreCollected(t *testing.T) {
	const n = 2000
	url := testenv.AMQP(t)
	topo := topology(t, url, false)
	body := make([]byte, 1<<10)
	msgs := make([]amqp091.Publishing, n)
	for i := range msgs {
		msgs[i] = amqp091.Publishing{MessageId: "order-" + strconv.Itoa(i), Body: body}
	}
	publishRaw(t, url, topo.Queue, msgs...)
	store, err := memory.NewStore(consumer.WithScope("orders"))
	if err != nil {
		t.Fatal(err)
	}
	seen := &testenv.Handed[byte]{} // each delivery's body, which the worker keeps with it
	w, err := idemamqp.NewWorker(store, url, topo, func(_ context.Context, d amqp091.Delivery) (int, error) {
		seen.Add(&d.Body[0])
		return 0, nil
	}, idemamqp.WithDeclare(false))
	if err != nil {
		t.Fatal(err)
	}
	start(t, w)
	for deadline := time.Now().Add(60 * time.Second); seen.Len() < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d deliveries ran", seen.Len(), n)
		}
	}

	if got := seen.Len(); got != n {
		t.Fatalf("%d handler runs, want %d", got, n)
	}
	if live := seen.Reachable(n / 5); live > n/5 {
		t.Errorf("%d of %d finished deliveries still reachable, want at most %d: finished deliveries are kept alive", live, n, n/5)
	}
}
