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
