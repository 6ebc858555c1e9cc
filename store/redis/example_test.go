package redis_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idemkit/consumer"
	redisstore "github.com/idemkit/idemkit/store/redis"
	goredis "github.com/redis/go-redis/v9"
)

// A store whose outcomes wait for one replica of a Sentinel-managed primary: a
// completion is reported done only once a replica has it, so a failover that
// promotes that replica loses none.
func ExampleWithReplicaAcks() {
	client := goredis.NewFailoverClient(&goredis.FailoverOptions{
		MasterName: "idemkit", SentinelAddrs: []string{"127.0.0.1:26379"}})
	store, err := redisstore.NewStore(client, consumer.WithScope("payments"),
		redisstore.WithReplicaAcks(1, 250*time.Millisecond), redisstore.WithReplicaAcksOnClaims())
	if err != nil {
		fmt.Println(err)
		return
	}
	r := consumer.ExecuteIdempotently(context.Background(), store, "charge-42", nil, func(ctx context.Context) (string, error) {
		return "charged", nil
	})
	if errors.Is(r.Err, redisstore.ErrNotDurable) {
		// Applied on the primary, not yet on a replica: the message is retried
		// later; its handler does not run again unless a failover lost the record.
		fmt.Println("not durable yet:", r.Err)
	}
}
