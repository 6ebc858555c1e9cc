package consumer_test

import (
	"testing"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/consumer/consumertest"
)

func TestMemoryStoreConformance(t *testing.T) {
	consumertest.Run(t, func(t *testing.T, opts ...consumer.Option) (consumer.Store, error) {
		return consumer.NewMemoryStore(opts...)
	})
}

// The memory store has no client, no schema, and no way to hold a value that
// is not its record: its bad input is a nil *MemoryStore.
func TestMemoryStoreBadInput(t *testing.T) {
	consumertest.RunBadInput(t, consumertest.BadInputFixtures{
		New: func(t *testing.T, opts ...consumer.Option) (consumer.Store, error) {
			return consumer.NewMemoryStore(opts...)
		},
		NilStore: consumer.Store((*consumer.MemoryStore)(nil)),
	})
}
