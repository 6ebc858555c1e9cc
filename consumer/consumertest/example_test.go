package consumertest_test

import (
	"testing"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/consumer/consumertest"
	"github.com/idemkit/idemkit/store/memory"
)

// A store implementation proves itself by passing the suite from its own tests.
func ExampleRun() {
	_ = func(t *testing.T) {
		consumertest.Run(t, func(t *testing.T, opts ...consumer.Option) (consumer.Store, error) {
			return memory.NewStore(opts...)
		})
	}
}
