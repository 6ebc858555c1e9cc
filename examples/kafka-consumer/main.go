// Command kafka-consumer is a payments consumer made idempotent with
// adapters/kafka: each PaymentRequested event charges a card once, however often
// Kafka delivers it.
//
// By default it runs against an in-process Kafka (kfake) and an in-process Redis
// (miniredis), publishing a few events itself, some twice. Point it at real servers
// with IDEMKIT_KAFKA_BROKERS (the topic "payments" and "payments.dlq" must exist, or
// it creates them) and IDEMKIT_REDIS_ADDR.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/idemkit/idemkit/adapters/kafka"
	"github.com/idemkit/idemkit/consumer"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// PaymentRequested is the event on the "payments" topic.
type PaymentRequested struct {
	PaymentID string `json:"payment_id"`
	Card      string `json:"card"`
	Cents     int    `json:"cents"`
}

// Charge is what the handler returns; idemkit stores it and hands it back on duplicates.
type Charge struct {
	ChargeID string `json:"charge_id"`
	Cents    int    `json:"cents"`
}

// gateway stands in for the card processor and its ledger table. Like
// UPDATE charges SET ... WHERE payment_id = $1 AND fence < $2, it refuses a write
// whose fence is not newer than the last one: a worker whose claim was taken over
// cannot overwrite its successor.
type gateway struct {
	mu     sync.Mutex
	fences map[string]int64
	cents  map[string]int
}

var errDeclined = errors.New("card declined")

func (g *gateway) charge(ctx context.Context, p PaymentRequested) (Charge, error) {
	fence, _ := consumer.FenceFromContext(ctx)
	if strings.HasPrefix(p.Card, "0000") {
		return Charge{}, consumer.Permanent(errDeclined) // retrying will not help
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if fence <= g.fences[p.PaymentID] {
		return Charge{}, fmt.Errorf("stale writer for %s (fence %d)", p.PaymentID, fence)
	}
	g.fences[p.PaymentID] = fence
	g.cents[p.PaymentID] += p.Cents
	return Charge{ChargeID: fmt.Sprintf("ch_%s_%d", p.PaymentID, fence), Cents: p.Cents}, nil
}

// printer is an observer of the store (consumer.WithObserver) that prints how each
// record ended; the adapter gives each event the record's partition and offset.
type printer struct{}

func (printer) OnOutcome(e consumer.OutcomeEvent) {
	if e.Action == consumer.Ack { // a retry runs again; a dead letter ends in OnDeadLetter
		fmt.Printf("  partition %d offset %-3d %-10s %s\n", e.Partition, e.Offset, e.Outcome, e.Key)
	}
}

func (printer) OnDeadLetter(e consumer.DeadLetterEvent) {
	fmt.Printf("  partition %d offset %-3d -> %s: %v\n", e.Partition, e.Offset, e.Destination, e.Err)
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kafka-consumer:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	brokers, redisAddr, demo := strings.Split(os.Getenv("IDEMKIT_KAFKA_BROKERS"), ","), os.Getenv("IDEMKIT_REDIS_ADDR"), false
	if os.Getenv("IDEMKIT_KAFKA_BROKERS") == "" {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return err
		}
		defer cluster.Close()
		brokers, demo = cluster.ListenAddrs(), true
	}
	if redisAddr == "" {
		mini, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mini.Close()
		redisAddr = mini.Addr()
	}
	admin, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer admin.Close()
	_, _ = kadm.NewClient(admin).CreateTopics(ctx, 4, 1, nil, "payments", "payments.dlq") // may exist already
	if demo {
		if err := publishSamples(ctx, admin); err != nil {
			return err
		}
	}

	// --- the wiring: a store, your kgo options, a handler ---
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	store, err := redisstore.NewStore(rdb, consumer.WithScope("payments-service"), consumer.WithLease(30*time.Second),
		consumer.WithObserver(printer{}))
	if err != nil {
		return err
	}
	gw := &gateway{fences: map[string]int64{}, cents: map[string]int{}}
	decode := func(rec *kgo.Record) (PaymentRequested, error) {
		var p PaymentRequested
		if err := json.Unmarshal(rec.Value, &p); err != nil {
			return p, err
		}
		if p.PaymentID == "" {
			return p, errors.New("payment_id is missing")
		}
		return p, nil
	}
	c, err := kafka.NewTyped(store, []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ConsumerGroup("payments-service"),
		kgo.ConsumeTopics("payments"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}, decode, func(ctx context.Context, p PaymentRequested, _ *kgo.Record) (Charge, error) {
		return gw.charge(ctx, p)
	},
		kafka.WithValueKey(func(p PaymentRequested) (consumer.Key, error) { return consumer.ParseKey("payment:" + p.PaymentID) }),
		kafka.WithLogger(slog.New(slog.DiscardHandler)),
	)
	if err != nil {
		return err
	}
	// --- end of the wiring ---

	fmt.Println("consuming payments (Ctrl-C to stop):")
	if demo { // stop once the samples are done
		go func() {
			time.Sleep(3 * time.Second)
			stop()
		}()
	}
	if err := c.Run(ctx); err != nil {
		return err
	}
	fmt.Println("\ncharged:")
	for id, cents := range gw.cents {
		fmt.Printf("  %s %d cents\n", id, cents)
	}
	return nil
}

func publishSamples(ctx context.Context, cl *kgo.Client) error {
	samples := []PaymentRequested{
		{PaymentID: "pay-1", Card: "4242", Cents: 1999},
		{PaymentID: "pay-2", Card: "4000", Cents: 500},
		{PaymentID: "pay-1", Card: "4242", Cents: 1999}, // the producer retried
		{PaymentID: "pay-3", Card: "0000", Cents: 700},  // will be declined: dead-lettered
		{PaymentID: "pay-2", Card: "4000", Cents: 500},  // again
	}
	var recs []*kgo.Record
	for _, p := range samples {
		body, _ := json.Marshal(p)
		recs = append(recs, &kgo.Record{Topic: "payments", Key: []byte(p.PaymentID), Value: body})
	}
	recs = append(recs, &kgo.Record{Topic: "payments", Key: []byte("garbled"), Value: []byte("{not json")})
	return cl.ProduceSync(ctx, recs...).FirstErr()
}
