// Command kafkashare is a payments worker pool on a Kafka share group (KIP-932:
// many members on one partition, records acknowledged one by one) made
// idempotent with adapters/kafkashare: each PaymentRequested event charges a card
// once, however often Kafka delivers it, and a poison event goes to the
// dead-letter topic once and is accepted.
//
// It runs against an in-process Kafka (kfake, with share groups) and an
// in-process Redis (miniredis), publishing a few events itself, some twice.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/idemkit/idemkit/adapters/kafkashare"
	"github.com/idemkit/idemkit/consumer"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// PaymentRequested is the event on the "payments" topic.
type PaymentRequested struct {
	PaymentID string `json:"payment_id"`
	Cents     int    `json:"cents"`
}

// ledger stands in for the card processor: charges per payment.
type ledger struct {
	mu      sync.Mutex
	charges map[string]int
}

func (l *ledger) charge(p PaymentRequested) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.charges[p.PaymentID]++
}

// dead counts the dead-letter copies idemkit confirmed: an observer of the store.
type dead struct {
	mu sync.Mutex
	n  int
}

func (d *dead) OnDeadLetter(consumer.DeadLetterEvent) { d.mu.Lock(); d.n++; d.mu.Unlock() }

// accepted counts the records acknowledged for good (ACCEPT).
type accepted struct {
	mu sync.Mutex
	n  int
}

func (a *accepted) OnShareAction(e kafkashare.ShareActionEvent) {
	if e.Status == kgo.AckAccept {
		a.mu.Lock()
		a.n++
		a.mu.Unlock()
	}
}

func (a *accepted) count() int { a.mu.Lock(); defer a.mu.Unlock(); return a.n }

func main() {
	if _, err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "kafkashare:", err)
		os.Exit(1)
	}
}

// run publishes the events, consumes them with two share-group members, and
// returns the charges per payment once every record is accepted.
func run(ctx context.Context, out io.Writer) (map[string]int, error) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "payments", "payments.dlq"))
	if err != nil {
		return nil, err
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	mr, err := miniredis.Run()
	if err != nil {
		return nil, err
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	// A new share group starts at the latest offset: read what is there already.
	admin, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	if err := kafkashare.SetGroupConfigs(ctx, admin, "payments-workers",
		map[string]string{"share.auto.offset.reset": "earliest"}); err != nil {
		return nil, err
	}
	events := []PaymentRequested{{"pay-1", 1999}, {"pay-2", 500}, {"pay-1", 1999}, {"pay-3", 42}, {"pay-2", 500}, {"poison", 0}}
	for _, ev := range events {
		v, _ := json.Marshal(ev)
		rec := &kgo.Record{Topic: "payments", Value: v,
			Headers: []kgo.RecordHeader{{Key: kafkashare.DefaultKeyHeader, Value: []byte("payment:" + ev.PaymentID)}}}
		if err := admin.ProduceSync(ctx, rec).FirstErr(); err != nil {
			return nil, err
		}
	}

	acks, dl := &accepted{}, &dead{}
	store, err := redisstore.NewStore(rdb, consumer.WithScope("payments-workers"), consumer.WithObserver(acks, dl))
	if err != nil {
		return nil, err
	}
	book := &ledger{charges: map[string]int{}}
	c, err := kafkashare.NewTyped(store,
		[]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ShareGroup("payments-workers"), kgo.ConsumeTopics("payments")},
		func(rec *kgo.Record) (PaymentRequested, error) {
			var p PaymentRequested
			err := json.Unmarshal(rec.Value, &p)
			return p, err
		},
		func(ctx context.Context, p PaymentRequested, _ *kgo.Record) (int, error) {
			if p.Cents <= 0 {
				return 0, consumer.Permanent(errors.New("no amount")) // dead-lettered once, then accepted
			}
			n, _ := kafkashare.DeliveryCount(ctx)
			book.charge(p)
			fmt.Fprintf(out, "charged %s %d cents (delivery %d)\n", p.PaymentID, p.Cents, n)
			return p.Cents, nil
		},
		kafkashare.WithClients(2))
	if err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	deadline := time.Now().Add(time.Minute)
	for acks.count() < len(events) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		return nil, err
	}
	if n := acks.count(); n < len(events) {
		return nil, fmt.Errorf("only %d of %d records accepted", n, len(events))
	}
	dl.mu.Lock()
	fmt.Fprintf(out, "%d records accepted, %d dead-lettered\n", acks.count(), dl.n)
	dl.mu.Unlock()
	book.mu.Lock()
	defer book.mu.Unlock()
	return book.charges, nil
}
