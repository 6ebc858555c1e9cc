package dynamodb

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/consumer/consumertest"
)

// TestConformance runs the suite every consumer.Store passes. The workers of
// these tests read one clock, so no skew allowance is added to leases. The test
// server is one Node.js process: 64 goroutines racing on it beside a busy machine
// have seen calls take over the default 5s bound, so the suite's calls get 30s
// (a case that sets its own bound keeps it; faults_test.go tests the bound).
func TestConformance(t *testing.T) {
	consumertest.Run(t, func(t *testing.T, opts ...consumer.Option) (consumer.Store, error) {
		return newStore(t, Config{ClockSkew: NoClockSkew}, append([]consumer.Option{consumer.WithCallTimeout(30 * time.Second)}, opts...)...)
	})
}

// TestAgree: the store answers as the memory store does, reply for reply and
// record for record (read back with Peek), over thousands of random calls.
func TestAgree(t *testing.T) {
	consumertest.Agree(t, func(t *testing.T, opts ...consumer.Option) (consumer.Store, error) {
		return newStore(t, Config{ClockSkew: NoClockSkew}, opts...)
	})
}
