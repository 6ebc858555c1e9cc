// Command amqp measures the RabbitMQ adapter against a raw manual-ack consumer in
// one run on one broker (make bench-amqp): the same number of messages published to
// a fresh queue for each path, prefetch 200, a no-op handler.
//
//   - raw: amqp091-go consumer, ack per delivery;
//   - adapter: amqp.NewWorker over a Redis store, every delivery through the
//     idempotent batch path.
//
// The broker is IDEMKIT_AMQP_URL or amqp://guest:guest@127.0.0.1:5672/; Redis a
// private redis-server unless IDEMKIT_REDIS_ADDR names one.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	idemamqp "github.com/idemkit/idemkit/adapters/amqp"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
)

type settled struct{ n atomic.Int64 }

func (s *settled) OnOutcome(amqp091.Delivery, consumer.Outcome) { s.n.Add(1) }

func main() {
	n := flag.Int("n", 50000, "messages per path and round")
	prefetch := flag.Int("prefetch", 200, "prefetch count")
	rounds := flag.Int("rounds", 2, "interleaved rounds")
	flag.Parse()
	if err := run(*n, *prefetch, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "bench-amqp:", err)
		os.Exit(1)
	}
}

func run(n, prefetch, rounds int) error {
	url := os.Getenv("IDEMKIT_AMQP_URL")
	if url == "" {
		url = testenv.LocalAMQPURL
	}
	conn, err := amqp091.Dial(url)
	if err != nil {
		return fmt.Errorf("no RabbitMQ at %s: %w", url, err)
	}
	defer conn.Close()
	addr, _, stop, err := testenv.RedisForTool()
	if err != nil {
		return err
	}
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()

	var rawTime, adTime time.Duration
	for r := 0; r < rounds; r++ {
		stamp := strconv.FormatInt(time.Now().UnixNano(), 36)
		rawTopo := idemamqp.Topology{Queue: "idemkit-bench-raw-" + stamp}
		adTopo := idemamqp.Topology{Queue: "idemkit-bench-adapter-" + stamp}
		for _, topo := range []idemamqp.Topology{rawTopo, adTopo} {
			if err := topo.Declare(conn); err != nil {
				return err
			}
			defer func() { _ = topo.Delete(conn) }()
			if err := publish(conn, topo.Queue, n); err != nil {
				return err
			}
		}
		d, err := raw(url, rawTopo.Queue, n, prefetch)
		if err != nil {
			return err
		}
		rawTime += d
		d, err = adapter(url, rdb, adTopo, n, prefetch, stamp)
		if err != nil {
			return err
		}
		adTime += d
	}
	total := float64(n * rounds)
	rawRate, adRate := total/rawTime.Seconds(), total/adTime.Seconds()
	fmt.Printf("idemkit RabbitMQ bench: %d messages per path, prefetch %d, no-op handler, %d rounds\n\n", n, prefetch, rounds)
	fmt.Printf("%-40s %12s %9s\n", "path", "messages/s", "vs raw")
	fmt.Printf("%-40s %12.0f %8.2fx\n", "raw amqp091-go consumer, ack each", rawRate, 1.0)
	fmt.Printf("%-40s %12.0f %8.2fx\n", "idemkit worker (batch path)", adRate, adRate/rawRate)
	verdict := "met"
	if adRate < 0.8*rawRate {
		verdict = "MISSED"
	}
	fmt.Printf("\nadapter >= 0.8x raw: %.2fx %s\n", adRate/rawRate, verdict)
	return nil
}

func publish(conn *amqp091.Connection, queue string, n int) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	ctx := context.Background()
	body := []byte(`{"order":42,"items":3}`)
	var last *amqp091.DeferredConfirmation
	for i := 0; i < n; i++ {
		c, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false,
			amqp091.Publishing{MessageId: queue + "-" + strconv.Itoa(i), Body: body})
		if err != nil {
			return err
		}
		last = c
		if i%1000 == 999 {
			if ok, err := c.WaitContext(ctx); err != nil || !ok {
				return fmt.Errorf("publish not confirmed: %v", err)
			}
		}
	}
	if ok, err := last.WaitContext(ctx); err != nil || !ok {
		return fmt.Errorf("publish not confirmed: %v", err)
	}
	return nil
}

func raw(url, queue string, n, prefetch int) (time.Duration, error) {
	conn, err := amqp091.Dial(url)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return 0, err
	}
	start := time.Now()
	msgs, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		return 0, err
	}
	for i := 0; i < n; i++ {
		d := <-msgs
		if err := d.Ack(false); err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

func adapter(url string, rdb *redis.Client, topo idemamqp.Topology, n, prefetch int, stamp string) (time.Duration, error) {
	store, err := consumer.NewRedisStore(rdb, consumer.WithPrefix("idemkit-bench-amqp-"+stamp))
	if err != nil {
		return 0, err
	}
	if err := store.Load(context.Background()); err != nil {
		return 0, err
	}
	done := &settled{}
	w, err := idemamqp.NewWorker(store, url, topo,
		func(ctx context.Context, d amqp091.Delivery) (struct{}, error) { return struct{}{}, nil },
		idemamqp.WithPrefetch(prefetch), idemamqp.WithConcurrency(4), idemamqp.WithHooks(done), idemamqp.WithDeclare(false))
	if err != nil {
		return 0, err
	}
	return testenv.TimeUntil(w.Run, done.n.Load, int64(n), 5*time.Minute)
}
