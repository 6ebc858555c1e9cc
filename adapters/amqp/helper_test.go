package amqp_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	idemamqp "github.com/idemkit/idemkit/adapters/amqp"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
)

// Environment of a worker process (this test binary run again by a test).
const (
	envWorker = "IDEMKIT_TEST_AMQP_WORKER"
	envURL    = "IDEMKIT_TEST_AMQP_URL"
	envRedis  = "IDEMKIT_TEST_REDIS"
	envPrefix = "IDEMKIT_TEST_PREFIX"
	envQueue  = "IDEMKIT_TEST_QUEUE"
	envTrap   = "IDEMKIT_TEST_TRAP"
)

// helperMain runs this test binary as a worker process when a test asked for one
// (see process_test.go); it reports whether it did.
func helperMain() bool {
	if os.Getenv(envWorker) == "" {
		return false
	}
	if err := runWorker(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
	os.Exit(0)
	return true
}

// runWorker fulfils orders until it has done envTrap of them; then its handlers
// block before their effect (it "hangs" there until killed).
func runWorker() error {
	prefix := os.Getenv(envPrefix)
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(envRedis)})
	defer rdb.Close()
	store, err := redisstore.NewStore(rdb, consumer.WithPrefix(prefix), consumer.WithScope("fulfilment"),
		consumer.WithLease(time.Second))
	if err != nil {
		return err
	}
	book := testenv.NewLedger(rdb, prefix)
	trap, _ := strconv.Atoi(os.Getenv(envTrap))
	var done atomic.Int64
	handler := func(ctx context.Context, o order, d amqp091.Delivery) (string, error) {
		if done.Load() >= int64(trap) {
			<-ctx.Done()
			return "", ctx.Err()
		}
		if _, err := book.Apply(ctx, o.ID); err != nil {
			return "", err
		}
		if done.Add(1) == int64(trap) {
			rdb.Set(context.Background(), "{"+prefix+"}:trapped", "1", 0)
		}
		return "shipment-" + o.ID, nil
	}
	q := os.Getenv(envQueue)
	topo := idemamqp.Topology{Queue: q, DeadLetterQueue: q + ".dlq",
		RetryDelays: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}}
	w, err := idemamqp.NewTypedWorker(store, os.Getenv(envURL), topo, decodeOrder, handler,
		idemamqp.WithPrefetch(50), idemamqp.WithConcurrency(50))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	return w.Run(ctx)
}
