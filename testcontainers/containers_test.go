package testcontainers_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/idemkit/idemkit/consumer"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/idemkit/idemkit/testcontainers"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
)

var testNS = uuid.MustParse("6f1d2c3b-4a5e-4f60-8b71-0c2d3e4f5a6b")

// The Redis container runs idemkit's scripts: a key delivered twice runs its
// handler once.
func TestRedis(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: testcontainers.Redis(t)})
	defer rdb.Close()
	store, err := redisstore.NewStore(rdb, consumer.WithScope("testcontainers"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := consumer.NewKey(testNS, "order", "1")
	runs := 0
	charge := func(context.Context) (string, error) { runs++; return "ch_1", nil }
	first := consumer.ExecuteIdempotently(ctx, store, key, []byte("order 1"), charge)
	second := consumer.ExecuteIdempotently(ctx, store, key, []byte("order 1"), charge)
	if first.Outcome != consumer.Success || second.Outcome != consumer.Duplicate || second.Value != "ch_1" || runs != 1 {
		t.Fatalf("got %v, %v (%q) and %d handler runs; want SUCCESS, DUPLICATE (\"ch_1\") and 1 run",
			first.Outcome, second.Outcome, second.Value, runs)
	}
}

// The RabbitMQ URL takes a publish and hands the message back exactly once.
func TestRabbitMQ(t *testing.T) {
	conn, err := amqp091.Dial(testcontainers.RabbitMQ(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare("testcontainers", false, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ch.PublishWithContext(ctx, "", q.Name, false, false, amqp091.Publishing{Body: []byte("order 1")}); err != nil {
		t.Fatal(err)
	}
	var got []string
	testEventually(t, 10*time.Second, "the message is back", func() bool {
		d, ok, err := ch.Get(q.Name, true)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			got = append(got, string(d.Body))
		}
		return len(got) > 0
	})
	if _, ok, _ := ch.Get(q.Name, true); ok || len(got) != 1 || got[0] != "order 1" {
		t.Fatalf("got %q (and another: %v), want exactly [\"order 1\"]", got, ok)
	}
}

// The Kafka brokers take a record and a consumer reads it back from a clean start.
func TestKafka(t *testing.T) {
	brokers := testcontainers.Kafka(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("orders"),
		kgo.AllowAutoTopicCreation(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte("order 1")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) == 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("no record read back: %v", err)
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if len(got) != 1 || got[0] != "order 1" {
		t.Fatalf("read %q, want exactly [\"order 1\"]", got)
	}
}

// The PostgreSQL DSN opens the "test" database and takes a write.
func TestPostgres(t *testing.T) {
	db, err := sql.Open("pgx", testcontainers.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, `CREATE TABLE charges (order_id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO charges VALUES ('1')`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM charges`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("count = %d, %v; want 1", n, err)
	}
}

func testEventually(t *testing.T, within time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for: %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
