package testcontainers_test

import (
	"context"
	"testing"

	"github.com/idemkit/idemkit/consumer"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/idemkit/idemkit/testcontainers"
	"github.com/redis/go-redis/v9"
)

// A test of your own runs its handler against a real Redis in a container; the
// container is removed when the test ends, and the test is skipped where no
// container engine runs.
func ExampleRedis() {
	testCharge := func(t *testing.T) {
		rdb := redis.NewClient(&redis.Options{Addr: testcontainers.Redis(t)})
		defer rdb.Close()
		store, err := redisstore.NewStore(rdb, consumer.WithScope("payments-test"))
		if err != nil {
			t.Fatal(err)
		}
		key := consumer.NewKey(testNS, "order", "42")
		r := consumer.ExecuteIdempotently(context.Background(), store, key, []byte(`{"order":42}`),
			func(ctx context.Context) (string, error) { return "ch_42", nil })
		if r.Outcome != consumer.Success {
			t.Fatalf("outcome %v: %v", r.Outcome, r.Err)
		}
	}
	_ = testCharge // in a _test.go file: func TestCharge(t *testing.T) { ... }
}

// Kafka gives the seed brokers of a fresh single-node cluster.
func ExampleKafka() {
	testConsumer := func(t *testing.T) {
		brokers := testcontainers.Kafka(t, testcontainers.WithImage("apache/kafka:3.9.0"))
		_ = brokers // kgo.SeedBrokers(brokers...)
	}
	_ = testConsumer
}
