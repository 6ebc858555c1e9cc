package memory_test

import (
	"testing"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/consumer/consumertest"
	"github.com/idemkit/idemkit/store/memory"
)

func TestMemoryStoreConformance(t *testing.T) {
	consumertest.Run(t, func(t *testing.T, opts ...consumer.Option) (consumer.Store, error) {
		return memory.NewStore(opts...)
	})
}

// The memory store has no client, no schema, and no way to hold a value that
// is not its record: its bad input is a nil *MemoryStore.
func TestMemoryStoreBadInput(t *testing.T) {
	consumertest.RunBadInput(t, consumertest.BadInputFixtures{
		New: func(t *testing.T, opts ...consumer.Option) (consumer.Store, error) {
			return memory.NewStore(opts...)
		},
		NilStore: consumer.Store((*memory.Store)(nil)),
	})
}
