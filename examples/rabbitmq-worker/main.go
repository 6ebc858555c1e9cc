// Command rabbitmq-worker is an order-fulfilment worker made idempotent with
// adapters/amqp, and a small publisher that sends orders with duplicates.
//
//	go run ./examples/rabbitmq-worker            # publish 200 orders (a fifth twice), fulfil them, report
//	go run ./examples/rabbitmq-worker -publish 0 # only work, until Ctrl-C
//
// It needs RabbitMQ: IDEMKIT_AMQP_URL, or amqp://guest:guest@127.0.0.1:5672/ (make up
// starts one). Redis is in-process (miniredis) unless IDEMKIT_REDIS_ADDR is set.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	idemamqp "github.com/idemkit/idemkit/adapters/amqp"
	"github.com/idemkit/idemkit/consumer"
	redisstore "github.com/idemkit/idemkit/store/redis"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
)

// Order is the message body.
type Order struct {
	OrderID string `json:"order_id"`
	SKU     string `json:"sku"`
	Qty     int    `json:"qty"`
}

// Shipment is what fulfilling an order returns; duplicates get the stored one back.
type Shipment struct {
	Tracking string `json:"tracking"`
}

// warehouse stands in for the fulfilment system: reserving stock is the side
// effect that must happen once per order.
type warehouse struct {
	mu       sync.Mutex
	reserved map[string]int
}

var errOutOfStock = errors.New("sku discontinued")

func (w *warehouse) fulfil(ctx context.Context, o Order) (Shipment, error) {
	if o.SKU == "discontinued" {
		return Shipment{}, consumer.Permanent(errOutOfStock) // goes to the dead-letter queue
	}
	if ctx.Err() != nil { // the claim was lost (or the worker is stopping): another owner runs it
		return Shipment{}, context.Cause(ctx)
	}
	info, _ := consumer.InfoFromContext(ctx)
	w.mu.Lock()
	w.reserved[o.OrderID] += o.Qty
	w.mu.Unlock()
	return Shipment{Tracking: fmt.Sprintf("TRK-%s-%d", o.OrderID, info.Fence)}, nil
}

// report counts what the worker did: an observer of its store
// (consumer.WithObserver), told of every delivery's outcome, retry and dead letter.
type report struct{ success, duplicate, retried, dead atomic.Int64 }

func (r *report) OnOutcome(e consumer.OutcomeEvent) {
	switch e.Outcome {
	case consumer.Success:
		r.success.Add(1)
	case consumer.Duplicate:
		r.duplicate.Add(1)
	}
}
func (r *report) OnRetry(consumer.RetryEvent) { r.retried.Add(1) }
func (r *report) OnDeadLetter(e consumer.DeadLetterEvent) {
	r.dead.Add(1)
	fmt.Printf("  dead-lettered %s (delivery %d): %v\n", e.Key, e.DeliveryTag, e.Err)
}

func main() {
	n := flag.Int("publish", 200, "orders to publish before working (0: none)")
	queue := flag.String("queue", "orders", "work queue")
	flag.Parse()
	if err := run(*n, *queue); err != nil {
		fmt.Fprintln(os.Stderr, "rabbitmq-worker:", err)
		os.Exit(1)
	}
}

func run(n int, queue string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	url := os.Getenv("IDEMKIT_AMQP_URL")
	if url == "" {
		url = "amqp://guest:guest@127.0.0.1:5672/"
	}
	redisAddr := os.Getenv("IDEMKIT_REDIS_ADDR")
	if redisAddr == "" {
		mini, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mini.Close()
		redisAddr = mini.Addr()
	}
	topo := idemamqp.Topology{Queue: queue} // retry queues orders.retry.1s ... and orders.dlq
	conn, err := amqp091.Dial(url)
	if err != nil {
		return fmt.Errorf("cannot reach RabbitMQ at %s (set IDEMKIT_AMQP_URL, or `make up`): %w", url, err)
	}
	defer conn.Close()
	if err := topo.Declare(conn); err != nil {
		return err
	}
	if n > 0 {
		if err := publish(ctx, conn, queue, n); err != nil {
			return err
		}
	}

	// --- the wiring: a store, a topology, a handler ---
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	rep := &report{}
	store, err := redisstore.NewStore(rdb, consumer.WithScope("fulfilment"), consumer.WithObserver(rep))
	if err != nil {
		return err
	}
	wh := &warehouse{reserved: map[string]int{}}
	decode := func(d amqp091.Delivery) (Order, error) {
		var o Order
		return o, json.Unmarshal(d.Body, &o)
	}
	worker, err := idemamqp.NewTypedWorker(store, url, topo, decode,
		func(ctx context.Context, o Order, _ amqp091.Delivery) (Shipment, error) { return wh.fulfil(ctx, o) },
		idemamqp.WithPrefetch(50), idemamqp.WithConcurrency(8),
		idemamqp.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return err
	}
	// --- end of the wiring ---

	if n > 0 { // stop once everything published was handled
		go func() {
			for rep.success.Load()+rep.duplicate.Load()+rep.dead.Load() < int64(n+n/5) {
				time.Sleep(20 * time.Millisecond)
			}
			stop()
		}()
	}
	fmt.Printf("fulfilling orders from %q (Ctrl-C to stop)\n", queue)
	if err := worker.Run(ctx); err != nil {
		return err
	}
	fmt.Printf("\n  fulfilled %d orders, skipped %d duplicates, %d retried later, %d dead-lettered\n",
		rep.success.Load(), rep.duplicate.Load(), rep.retried.Load(), rep.dead.Load())
	wh.mu.Lock()
	defer wh.mu.Unlock()
	fmt.Printf("  warehouse reservations: %d orders\n", len(wh.reserved))
	return nil
}

// publish sends n orders with their id as MessageId, a fifth of them twice, in a
// shuffled order, and one for a discontinued SKU.
func publish(ctx context.Context, conn *amqp091.Connection, queue string, n int) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	var orders []Order
	for i := 0; i < n; i++ {
		o := Order{OrderID: fmt.Sprintf("o-%d-%04d", time.Now().Unix(), i), SKU: "sku-" + fmt.Sprint(i%7), Qty: 1 + i%3}
		if i == n-1 {
			o.SKU = "discontinued"
		}
		orders = append(orders, o)
		if i%5 == 0 {
			orders = append(orders, o) // a retried publish: the same message again
		}
	}
	rand.Shuffle(len(orders), func(i, j int) { orders[i], orders[j] = orders[j], orders[i] })
	for _, o := range orders {
		body, _ := json.Marshal(o)
		err := ch.PublishWithContext(ctx, "", queue, false, false, amqp091.Publishing{
			MessageId: o.OrderID, ContentType: "application/json", DeliveryMode: amqp091.Persistent, Body: body})
		if err != nil {
			return err
		}
	}
	fmt.Printf("published %d messages (%d orders)\n", len(orders), n)
	return nil
}
