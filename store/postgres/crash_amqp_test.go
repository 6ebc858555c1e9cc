package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	idemamqp "github.com/idemkit/idemkit/adapters/amqp"
	"github.com/idemkit/idemkit/internal/testenv"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Environment of a RabbitMQ worker process.
const (
	envAMQP  = "IDEMKIT_TEST_AMQP_URL"
	envQueue = "IDEMKIT_TEST_QUEUE"
)

// crashWorker runs this test binary as a RabbitMQ payments worker when a test asked
// for one; it reports whether it did.
func crashWorker() bool {
	if os.Getenv(envQueue) == "" {
		return false
	}
	err := runPaymentsWorker(context.Background(), os.Getenv(envCrashPoint), os.Getenv(envStore), os.Getenv(envAMQP),
		os.Getenv(envQueue), os.Getenv(envRedis), os.Getenv(envPrefix), os.Getenv(envSchema))
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
	os.Exit(0)
	return true
}

func paymentsTopology(queue string) idemamqp.Topology {
	return idemamqp.Topology{Queue: queue, RetryDelays: []time.Duration{200 * time.Millisecond, time.Second}}
}

// runPaymentsWorker consumes the payments queue, charging each payment in
// PostgreSQL with InTx; point names where it kills itself ("" never).
func runPaymentsWorker(ctx context.Context, point, storeKind, url, queue, redisAddr, prefix, schema string) error {
	ch, err := newCharger(ctx, point, storeKind, redisAddr, prefix, schema)
	if err != nil {
		return err
	}
	defer ch.close()
	w, err := idemamqp.NewTypedWorker(ch.store, url, paymentsTopology(queue),
		func(d amqp091.Delivery) (payment, error) {
			var p payment
			return p, json.Unmarshal(d.Body, &p)
		}, func(ctx context.Context, p payment, _ amqp091.Delivery) (string, error) { return ch.charge(ctx, p) },
		idemamqp.WithShutdownGrace(time.Second))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM)
	defer stop()
	return w.Run(ctx)
}

// The crash-point matrix through the RabbitMQ worker: as TestCrashMatrixKafka, the
// payments on a queue.
func TestCrashMatrixRabbitMQ(t *testing.T) {
	reps, _ := strconv.Atoi(os.Getenv("IDEMKIT_CRASH_REPS"))
	if reps < 1 {
		reps = 2
	}
	for _, storeKind := range []string{"redis", "postgres", "partitioned"} {
		for _, point := range []string{crashBeforeWrites, crashBeforeCommit, crashAfterCommit, crashAfterComplete} {
			for rep := range reps {
				t.Run(fmt.Sprintf("%s/%s/%d", storeKind, point, rep), func(t *testing.T) { crashRunAMQP(t, storeKind, point) })
			}
		}
	}
}

func crashRunAMQP(t *testing.T, storeKind, point string) {
	const n = 1000
	url := testenv.AMQP(t)
	pool := crashSchema(t, storeKind)
	var schema string
	if err := pool.QueryRow(context.Background(), `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	prefix := testenv.Prefix(t)
	queue := strings.ReplaceAll(prefix, ":", "-") + ".payments"
	conn, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	topo := paymentsTopology(queue)
	if err := topo.Declare(conn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c, err := amqp091.Dial(url); err == nil {
			_ = topo.Delete(c)
			_ = c.Close()
		}
	})
	publishToQueue(t, conn, queue, n)
	child := testenv.StartSelf(t, envCrashPoint+"="+point, envStore+"="+storeKind, envAMQP+"="+url, envQueue+"="+queue,
		envRedis+"="+testenv.RedisAddr(t), envPrefix+"="+prefix, envSchema+"="+schema)
	if !killedWithin(child.Process.Pid, 60*time.Second) {
		t.Fatalf("the worker never crashed at %s", point)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runPaymentsWorker(ctx, "", storeKind, url, queue, testenv.RedisAddr(t), prefix, schema)
	}()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	depths := func() map[string]int {
		out := map[string]int{}
		for _, q := range []string{queue, queue + ".dlq", topo.RetryQueue(200 * time.Millisecond), topo.RetryQueue(time.Second)} {
			if st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil); err == nil {
				out[q] = st.Messages
			}
		}
		return out
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		charged := len(rows(t, pool, "charges"))
		d := depths()
		if charged == n && d[queue] == 0 && d[queue+".dlq"] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 90s: %d of %d payments charged; queue depths %v", charged, n, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for id, c := range rows(t, pool, "charges") {
		if c != 1 {
			t.Fatalf("payment %s charged %d times", id, c)
		}
	}
}

func publishToQueue(t *testing.T, conn *amqp091.Connection, queue string, n int) {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	var msgs []amqp091.Publishing
	for i := range n {
		id := fmt.Sprintf("pay-%04d", i)
		body, _ := json.Marshal(payment{ID: id, Amount: 100 + i})
		for range 1 + btoi(i%5 == 0) {
			msgs = append(msgs, amqp091.Publishing{MessageId: id, Body: body, DeliveryMode: amqp091.Persistent})
		}
	}
	rand.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	var last *amqp091.DeferredConfirmation
	for _, m := range msgs {
		c, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, false, false, m)
		if err != nil {
			t.Fatal(err)
		}
		last = c
	}
	if ok, err := last.WaitContext(context.Background()); err != nil || !ok {
		t.Fatalf("publish not confirmed: %v", err)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
