package kafka_test

import (
	"context"
	"encoding/json"
	"log"
	"os"
	"os/signal"

	"github.com/idemkit/idemkit/adapters/kafka"
	"github.com/idemkit/idemkit/consumer"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Wiring the adapter into an existing franz-go consumer: the same kgo options,
// a store, and a handler that runs once per idempotency key.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	store, err := redisstore.NewStore(rdb, consumer.WithScope("payments-service"))
	if err != nil {
		log.Fatal(err)
	}
	type payment struct {
		ID    string `json:"id"`
		Cents int    `json:"cents"`
	}
	decode := func(rec *kgo.Record) (payment, error) {
		var p payment
		return p, json.Unmarshal(rec.Value, &p)
	}
	c, err := kafka.NewTyped(store, []kgo.Opt{
		kgo.SeedBrokers("127.0.0.1:9092"),
		kgo.ConsumerGroup("payments-service"),
		kgo.ConsumeTopics("payments"),
	}, decode, func(ctx context.Context, p payment, rec *kgo.Record) (string, error) {
		return "ch_" + p.ID, nil // charge the card here
	}, kafka.WithValueKey(func(p payment) (consumer.Key, error) { return consumer.ParseKey(p.ID) }))
	if err != nil {
		log.Fatal(err) // a configuration that could lose or repeat commits is refused here
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := c.Run(ctx); err != nil {
		log.Fatal(err) // the dead-letter topic payments.dlq is missing, say (or pass kafka.WithCreateDeadLetterTopics)
	}
}
