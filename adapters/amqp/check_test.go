package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	idemamqp "github.com/idemkit/idemkit/adapters/amqp"
	"github.com/idemkit/idemkit/internal/testenv"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Check before Run: nil on a broker that takes the worker; under WithDeclare(false)
// an error naming the queue that does not exist; the error of a broker that does
// not answer, within the context's deadline and never taken for a refusal. Check
// consumes nothing.
func TestCheck(t *testing.T) {
	url := testenv.AMQP(t)
	store, _, _ := newStore(t)
	h := func(ctx context.Context, d amqp091.Delivery) (int, error) { return 0, nil }
	topo := topology(t, url, false)
	publish(t, url, topo.Queue, 3, 0)
	w, err := idemamqp.NewWorker(store, url, topo, h)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Check(context.Background()); err != nil || depth(t, url, topo.Queue) != 3 {
		t.Fatalf("Check on a working broker: %v, %d of 3 messages left", err, depth(t, url, topo.Queue))
	}

	missing := idemamqp.Topology{Queue: fmt.Sprintf("idemkit-test-missing-%04x", rand.N(1<<16))}
	w, err = idemamqp.NewWorker(store, url, missing, h, idemamqp.WithDeclare(false))
	if err != nil {
		t.Fatal(err)
	}
	var refused *idemamqp.RefusedError
	if err := w.Check(context.Background()); err == nil || errors.As(err, &refused) ||
		!strings.Contains(err.Error(), missing.Queue) || !strings.Contains(err.Error(), "WithDeclare") {
		t.Fatalf("Check under WithDeclare(false) without the queue: %v; want an error naming %s", err, missing.Queue)
	}

	proxy, viaProxy := amqpProxy(t, url)
	proxy.Blackhole()
	w, err = idemamqp.NewWorker(store, viaProxy, topo, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	began := time.Now()
	err = w.Check(ctx)
	if err == nil || errors.As(err, &refused) || time.Since(began) > 5*time.Second {
		t.Fatalf("Check on a broker that does not answer: %v after %v; want a dial error, not a refusal, within the dial's bound",
			err, time.Since(began))
	}
	proxy.Pass()
}
