// Command quickstart shows idemkit making a consumer idempotent, with zero set-up.
//
// Several workers take order events from an at-least-once queue that delivers some
// events twice (sometimes to two workers at once) and loses one worker mid-payment
// (its connection to Redis dies with it and its messages are redelivered). Each
// worker charges through consumer.ExecuteIdempotently. At the end a ledger counts
// the charges per order: every order must be charged exactly once.
//
// Redis is an in-process server running the same Lua scripts (miniredis) unless
// IDEMKIT_REDIS_ADDR names a real one. The program exits 1 if any order was charged
// twice or not at all.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/uuid"
	"github.com/idemkit/idemkit/consumer"
	"github.com/redis/go-redis/v9"
)

// orders is the namespace of this demo's idempotency keys.
var orders = uuid.MustParse("3b0e2f8e-52c1-4c53-8a55-1f4a1d1b2c90")

type event struct {
	OrderID string
	Amount  int
}

type delivery struct {
	ev      event
	attempt int
}

// receipt is what the charge handler returns and idemkit stores for duplicates.
type receipt struct {
	ChargeID string `json:"charge_id"`
	Amount   int    `json:"amount"`
}

// ledger is the side effect: the payment provider's book of charges.
type ledger struct {
	mu      sync.Mutex
	charges map[string]int
}

func (l *ledger) charge(orderID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.charges[orderID]++
}

// queue is an at-least-once queue: a message is delivered until it is acked, and a
// retried one comes back after a delay.
type queue struct {
	ch          chan delivery
	outstanding sync.WaitGroup
	delivered   atomic.Int64
}

func (q *queue) publish(ev event) { q.outstanding.Add(1); q.ch <- delivery{ev: ev, attempt: 1} }
func (q *queue) ack()             { q.outstanding.Done() }
func (q *queue) retryLater(d delivery, after time.Duration) {
	d.attempt++
	time.AfterFunc(after, func() { q.ch <- d })
}

type stats struct {
	success, duplicate, inProgress, errors atomic.Int64
}

func main() {
	n := flag.Int("orders", 1000, "number of order events")
	workers := flag.Int("workers", 4, "number of workers")
	dupRate := flag.Float64("duplicates", 0.2, "share of events delivered twice")
	flag.Parse()
	if err := run(*n, *workers, *dupRate); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(n, workers int, dupRate float64) error {
	addr, where := os.Getenv("IDEMKIT_REDIS_ADDR"), "Redis at "+os.Getenv("IDEMKIT_REDIS_ADDR")
	if addr == "" {
		mini, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mini.Close()
		addr, where = mini.Addr(), "in-process Redis (miniredis) running idemkit's Lua scripts"
	}
	lease := 500 * time.Millisecond
	opts := []consumer.Option{
		consumer.WithScope("payments"),
		consumer.WithPrefix("idemkit-quickstart-" + strconv.FormatInt(time.Now().UnixNano(), 36)),
		consumer.WithLease(lease),
		consumer.WithLogger(slog.New(slog.DiscardHandler)),
	}
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	store, err := consumer.NewRedisStore(client, opts...)
	if err != nil {
		return err
	}
	if err := client.Ping(context.Background()).Err(); err != nil {
		return fmt.Errorf("cannot reach Redis at %s: %w", addr, err)
	}

	book := &ledger{charges: make(map[string]int)}
	q := &queue{ch: make(chan delivery, 4*n)}
	var st stats
	var takenOver atomic.Int64
	charge := func(ev event) func(ctx context.Context) (receipt, error) {
		return func(ctx context.Context) (receipt, error) {
			info, _ := consumer.InfoFromContext(ctx)
			if info.Attempt > 1 {
				takenOver.Add(1)
			}
			time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond) // the provider's latency
			book.charge(ev.OrderID)
			return receipt{ChargeID: "ch_" + ev.OrderID + "_" + strconv.FormatInt(info.Fence, 10), Amount: ev.Amount}, nil
		}
	}

	// One worker dies while charging three orders: its Redis connection goes with
	// it, so it can neither renew its leases nor complete. The queue redelivers its
	// unacked messages to the surviving workers.
	crashed := []event{{"crash-1", 10}, {"crash-2", 20}, {"crash-3", 30}}
	doomedClient := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	doomed, err := consumer.NewRedisStore(doomedClient, opts...)
	if err != nil {
		return err
	}
	ctx := context.Background()
	var dying sync.WaitGroup
	for _, ev := range crashed {
		claimed := make(chan struct{})
		dying.Add(1)
		go func() {
			defer dying.Done()
			consumer.ExecuteIdempotently(ctx, doomed, consumer.NewKey(orders, ev.OrderID), []byte(ev.OrderID),
				func(ctx context.Context) (receipt, error) {
					close(claimed)
					<-ctx.Done() // "dead": it never reaches the payment provider
					return receipt{}, context.Cause(ctx)
				})
		}()
		<-claimed
	}
	_ = doomedClient.Close()

	// Publish: every order once, some twice, and the crashed worker's three again.
	var events []event
	for i := 0; i < n; i++ {
		events = append(events, event{OrderID: fmt.Sprintf("order-%05d", i), Amount: 100 + i%900})
	}
	stream := append([]event(nil), events...)
	for _, ev := range events {
		if rand.Float64() < dupRate {
			stream = append(stream, ev)
		}
	}
	rand.Shuffle(len(stream), func(i, j int) { stream[i], stream[j] = stream[j], stream[i] })
	stream = append(crashed, stream...)

	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range q.ch {
				q.delivered.Add(1)
				key := consumer.NewKey(orders, d.ev.OrderID)
				r := consumer.ExecuteIdempotently(ctx, store, key, []byte(d.ev.OrderID), charge(d.ev))
				switch r.Action() {
				case consumer.Settle:
					if r.Outcome == consumer.Success {
						st.success.Add(1)
					} else {
						st.duplicate.Add(1)
					}
					q.ack()
				case consumer.Wait:
					st.inProgress.Add(1)
					q.retryLater(d, min(r.LeaseLeft, 100*time.Millisecond)+10*time.Millisecond)
				case consumer.Retry:
					st.errors.Add(1)
					q.retryLater(d, 50*time.Millisecond)
				case consumer.DeadLetter:
					st.errors.Add(1)
					fmt.Fprintf(os.Stderr, "dead-letter %s: %v\n", d.ev.OrderID, r.Err)
					q.ack()
				}
			}
		}()
	}
	for _, ev := range stream {
		q.publish(ev)
	}
	q.outstanding.Wait()
	close(q.ch)
	wg.Wait()
	dying.Wait()
	elapsed := time.Since(start)

	double, missing := 0, 0
	for _, ev := range append(events, crashed...) {
		switch c := book.charges[ev.OrderID]; {
		case c > 1:
			double++
			fmt.Fprintf(os.Stderr, "order %s charged %d times\n", ev.OrderID, c)
		case c == 0:
			missing++
			fmt.Fprintf(os.Stderr, "order %s never charged\n", ev.OrderID)
		}
	}
	executed := 0
	for _, c := range book.charges {
		executed += c
	}
	fmt.Printf("idemkit quickstart: %d workers, %d orders, %s\n\n", workers, n+len(crashed), where)
	row := func(name string, v any) { fmt.Printf("  %-38s %8v\n", name, v) }
	row("messages delivered", q.delivered.Load())
	row("handlers executed (orders charged)", executed)
	row("duplicates skipped", st.duplicate.Load())
	row("in progress elsewhere, retried later", st.inProgress.Load())
	row("taken over after a worker crash", takenOver.Load())
	row("errors", st.errors.Load())
	row("double executions", double)
	row("orders never charged", missing)
	fmt.Printf("\n  %d deliveries in %v\n", q.delivered.Load(), elapsed.Round(time.Millisecond))
	if double > 0 || missing > 0 {
		return fmt.Errorf("%d orders charged twice, %d never charged", double, missing)
	}
	fmt.Println("  every order charged exactly once")
	return nil
}
