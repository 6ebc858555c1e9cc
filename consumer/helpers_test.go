package consumer_test

import (
	"testing"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
)

// must returns s, panicking on err: for stores a test cannot run without.
func must[S any](s S, err error) S {
	if err != nil {
		panic(err)
	}
	return s
}

// newRedisStore is a Redis store under the test's own key prefix.
func newRedisStore(t *testing.T, c redis.UniversalClient, opts ...consumer.Option) *redisstore.Store {
	t.Helper()
	s, err := redisstore.NewStore(c, append([]consumer.Option{consumer.WithPrefix(testenv.Prefix(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
