package memory_test

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/store/memory"
)

// stepClock is a clock that moves only when a test moves it (package
// idemkittest has one: Clock).
type stepClock struct{ now time.Time }

func (c *stepClock) Now() time.Time { return c.now }

// A memory store on a fake clock: a worker's claim is taken over once the
// clock passes its lease, without waiting 30 seconds.
func ExampleWithClock() {
	ctx := context.Background()
	clock := &stepClock{now: time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)}
	store, err := memory.NewStore(consumer.WithScope("payments"), memory.WithClock(clock))
	if err != nil {
		panic(err)
	}
	claim := func(owner string) consumer.ClaimReply {
		return store.Begin(ctx, []consumer.Claim{{Key: "charge:order-42", Owner: owner, Start: true}})[0]
	}
	fmt.Println(claim("worker-1").Status) // the first worker claims the key, then dies
	fmt.Println(claim("worker-2").Status) // its lease is live
	clock.now = clock.now.Add(consumer.DefaultLease)
	r := claim("worker-2")
	fmt.Println(r.Status, "fence", r.Fence)
	// Output:
	// ACQUIRED
	// IN_PROGRESS
	// TAKEN_OVER fence 2
}
