package lua_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/idemkit/idemkit/lua"
	"github.com/redis/go-redis/v9"
)

// The scripts claim, complete and read records; the consumer package drives them.
func Example() {
	srv, _ := miniredis.Run() // any Redis; an in-process one keeps the example self-contained
	defer srv.Close()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	r := lua.NewRunner(c)
	ctx := context.Background()

	args := lua.BeginArgs{Lease: 30 * time.Second, Retention: time.Hour, MaxAttempts: 5, Now: time.Now().Unix()}
	reps := make([]lua.BeginReply, 1)
	r.Begin(ctx, args, lua.Claims{Items: []lua.BeginItem{{Key: "idemkit:{payments:order-42}", Owner: "worker-1"}}, Replies: reps})
	fmt.Println("claim:", reps[0].Code == lua.Acquired, "fence", reps[0].Fence)

	r.Begin(ctx, args, lua.Claims{Items: []lua.BeginItem{{Key: "idemkit:{payments:order-42}", Owner: "worker-2"}}, Replies: reps})
	fmt.Println("second claim in progress:", reps[0].Code == lua.InProgress)

	acks := make([]lua.AckReply, 1)
	r.Settle(ctx, lua.SettleArgs{MaxAttempts: 5, Now: time.Now().Unix()}, lua.Settlements{Items: []lua.SettleItem{{
		Key: "idemkit:{payments:order-42}", Owner: "worker-1", Fence: 1, Attempts: 1,
		Complete: true, Result: []byte(`"ch_1"`),
	}}, Replies: acks})
	fmt.Println("completed:", acks[0].Ack == lua.AckOK)

	rec, _ := r.Peek(ctx, "idemkit:{payments:order-42}")
	fmt.Println("state:", rec.StateName(), "result:", string(rec.Result))
	// Output:
	// claim: true fence 1
	// second claim in progress: true
	// completed: true
	// state: completed result: "ch_1"
}
