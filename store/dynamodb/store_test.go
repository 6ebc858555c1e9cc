package dynamodb

import (
	"testing"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/consumer/consumertest"
)

// TestConformance runs the suite every consumer.Store passes. The workers of
// these tests read one clock, so no skew allowance is added to leases.
func TestConformance(t *testing.T) {
	consumertest.Run(t, func(t *testing.T, opts ...consumer.Option) (consumer.Store, error) {
		return newStore(t, Config{ClockSkew: NoClockSkew}, opts...)
	})
}

// TestAgree: the store answers as the memory store does, reply for reply and
// record for record (read back with Peek), over thousands of random calls.
func TestAgree(t *testing.T) {
	consumertest.Agree(t, func(t *testing.T, opts ...consumer.Option) (consumer.Store, error) {
		return newStore(t, Config{ClockSkew: NoClockSkew}, opts...)
	})
}
