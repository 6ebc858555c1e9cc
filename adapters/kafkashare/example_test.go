package kafkashare_test

import (
	"context"
	"fmt"

	"github.com/idemkit/idemkit/adapters/kafkashare"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/store/memory"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A share-group member pool whose handler charges once per Idempotency-Key
// header, however often the broker delivers the record.
func ExampleNew() {
	store, err := memory.NewStore(consumer.WithScope("payments-service"))
	if err != nil {
		panic(err)
	}
	c, err := kafkashare.New(store, []kgo.Opt{
		kgo.SeedBrokers("localhost:9092"),
		kgo.ShareGroup("payments-service"),
		kgo.ConsumeTopics("payments"),
	}, func(ctx context.Context, rec *kgo.Record) (string, error) {
		n, _ := kafkashare.DeliveryCount(ctx)
		return fmt.Sprintf("charged %s on delivery %d", rec.Value, n), nil
	}, kafkashare.WithClients(4), kafkashare.WithMaxPollRecords(250))
	if err != nil {
		panic(err)
	}
	// c.Run(ctx) consumes until ctx is cancelled, then closes the clients.
	c.Close() // without Run
	fmt.Println(len(c.Clients()), "members")

	// Output: 4 members
}
