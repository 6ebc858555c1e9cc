package amqp_test

import (
	"context"
	"log"
	"os"
	"os/signal"

	idemamqp "github.com/idemkit/idemkit/adapters/amqp"
	"github.com/idemkit/idemkit/consumer"
	redisstore "github.com/idemkit/idemkit/store/redis"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
)

// A worker over the "orders" queue: retries go through orders.retry.* and what
// cannot be processed ends in orders.dlq.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	store, err := redisstore.NewStore(rdb, consumer.WithScope("fulfilment"))
	if err != nil {
		log.Fatal(err)
	}
	w, err := idemamqp.NewWorker(store, "amqp://guest:guest@127.0.0.1:5672/", idemamqp.Topology{Queue: "orders"},
		func(ctx context.Context, d amqp091.Delivery) (string, error) {
			return "shipped " + d.MessageId, nil // reserve stock here: once per MessageId
		}, idemamqp.WithPrefetch(50), idemamqp.WithConcurrency(8))
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := w.Check(ctx); err != nil { // a wrong password or vhost says so here
		log.Fatal(err)
	}
	// A readiness probe serves w.Ready(): nil while the worker consumes.
	if err := w.Run(ctx); err != nil { // a *RefusedError or a *TopologyConflictError
		log.Fatal(err)
	}
}

// A worker that runs the jobs of one account one at a time, in the order they
// were sent, and jobs of different accounts at once: the account travels in a
// header; each job's idempotency key is its MessageId.
func ExampleWithOrdering() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	store, err := redisstore.NewStore(rdb, consumer.WithScope("billing"))
	if err != nil {
		log.Fatal(err)
	}
	w, err := idemamqp.NewWorker(store, "amqp://guest:guest@127.0.0.1:5672/", idemamqp.Topology{Queue: "billing-jobs"},
		func(ctx context.Context, d amqp091.Delivery) (string, error) {
			return "charged " + d.MessageId, nil // after the account's earlier jobs, never beside them
		}, idemamqp.WithOrdering(idemamqp.ByKeyHeader("account")))
	if err != nil {
		log.Fatal(err) // an empty header name says so here
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
