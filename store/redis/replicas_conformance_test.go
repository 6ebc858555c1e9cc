package redis_test

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/consumer/consumertest"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
)

// TestReplicaAcksConformance: the store passes the conformance suite every store
// passes with every outcome and claim waiting for a replica (WithReplicaAcks(1)
// and WithReplicaAcksOnClaims on a Sentinel-managed primary with one replica): the
// waits change when an outcome is reported, never what it is.
func TestReplicaAcksConformance(t *testing.T) {
	client := testenv.RedisReplicatedSentinel(t).Client(t)
	consumertest.Run(t, func(t *testing.T, opts ...consumer.Option) (consumer.Store, error) {
		all := append([]consumer.Option{consumer.WithPrefix(testenv.Prefix(t)),
			redisstore.WithReplicaAcks(1, 500*time.Millisecond), redisstore.WithReplicaAcksOnClaims()}, opts...)
		return redisstore.NewStore(client, all...)
	})
}
