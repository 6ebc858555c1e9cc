package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// A RabbitMQ dead-letter queue of 3 copies: plan and redrive dry runs move nothing,
// the executed redrive moves each copy to its work queue and off the dead-letter
// queue, and replay --queue acks what ran.
func TestRedriveAndReplayQueueCLI(t *testing.T) {
	url := testenv.AMQP(t)
	addr, prefix := testenv.RedisAddr(t), testenv.Prefix(t)
	store, err := redisstore.NewStore(testenv.Redis(t), consumer.WithPrefix(prefix), consumer.WithScope("payments"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	base := strings.ReplaceAll(prefix, ":", "-")
	work, dlq := base+".pay", base+".pay.dlq"
	for _, q := range []string{work, dlq} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = ch.QueueDelete(q, false, false, false) })
	}
	for i := 0; i < 3; i++ {
		k := fmt.Sprintf("p-%d", i)
		consumer.ExecuteIdempotently(context.Background(), store, consumer.Key(k), []byte(k), func(context.Context) (int, error) {
			return 0, consumer.Permanent(errors.New("declined"))
		})
		if err := ch.PublishWithContext(context.Background(), "", dlq, false, false, amqp091.Publishing{MessageId: k, Body: []byte(k),
			Headers: amqp091.Table{"x-idemkit-key": k, "x-idemkit-original-queue": work, "x-idemkit-kind": "PERMANENT"}}); err != nil {
			t.Fatal(err)
		}
	}
	depth := func(q string, want int) {
		t.Helper()
		testenv.Eventually(t, 10*time.Second, fmt.Sprintf("%s holds %d", q, want), func() bool {
			st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
			return err == nil && st.Messages == want
		})
	}
	depth(dlq, 3)
	global := []string{"--redis", addr, "--prefix", prefix, "--scope", "payments", "--amqp-url", url}
	redrive := append(append([]string{}, global...), "redrive", "--queue", dlq)
	expect(t, squeeze(idemkit(t, redrive...)), 0, "NOT_RERUN 3", "kind PERMANENT 3", "dry run")
	expect(t, idemkit(t, append(redrive, "--topic", "x")...), 2, "give --topic or --queue")
	depth(dlq, 3)
	expect(t, squeeze(idemkit(t, append(redrive, "--rerun", "--execute", "--reason", "fixed")...)), 0, "REDRIVEN 3")
	depth(dlq, 0)
	depth(work, 3)

	plan := append(append([]string{}, global...), "plan", "--queue", work)
	expect(t, squeeze(idemkit(t, plan...)), 0, "RETRY 3")
	depth(work, 3)
	replay := append(append([]string{}, global...), "replay", "--queue", work, "--exec", "cat")
	expect(t, idemkit(t, append(replay, "--execute", "--checkpoint", t.TempDir()+"/cp")...), 2, "drop --checkpoint")
	expect(t, squeeze(idemkit(t, append(replay, "--execute")...)), 0, "RAN 3")
	depth(work, 0)
	expect(t, idemkit(t, "--redis", addr, "--prefix", prefix, "--scope", "payments", "inspect", "p-1"), 0, "completed")

	expect(t, idemkit(t, "--redis", addr, "--amqp-url", "amqp://guest:secret@127.0.0.1:1/", "--timeout", "1s", "plan", "--queue", "q"), 5,
		"did not answer", "guest:xxxxx@")
}

// squeeze collapses the runs of spaces that align a table's columns.
func squeeze(r result) result {
	r.stdout = strings.Join(strings.Fields(strings.ReplaceAll(r.stdout, "\n", " \x00 ")), " ")
	r.stdout = strings.ReplaceAll(r.stdout, " \x00 ", "\n")
	return r
}
