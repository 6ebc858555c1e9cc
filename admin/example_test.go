package admin_test

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/store/memory"
)

// A worker died holding a key's claim: find it, unstick it with a reason, and see
// the reason in the record, which keeps it once the key has run.
func Example() {
	ctx := context.Background()
	store, _ := memory.NewStore(consumer.WithScope("payments"), consumer.WithLease(time.Hour))
	// A worker claims order 42 and dies before finishing it.
	store.Begin(ctx, []consumer.Claim{{Key: "order-42", Owner: "worker-7"}})

	in, err := admin.New(store)
	if err != nil {
		panic(err)
	}
	page, _ := in.List(ctx, admin.Query{States: []string{"started"}})
	for _, r := range page.Records {
		fmt.Println("stuck:", r.Key, "owner", r.Owner, "fence", r.Fence)
	}
	res, err := in.Unstick(ctx, admin.Change{Key: "order-42", Actor: "alice", Reason: "worker-7 died in the outage"})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Before, "->", res.After, "fence", res.Fence, "->", res.NewFence)
	rec, _ := in.Inspect(ctx, "", "order-42")
	fmt.Println(rec.State, rec.Notes[0].Text)

	// The next delivery runs it, once.
	r := consumer.ExecuteIdempotently(ctx, store, "order-42", nil, func(ctx context.Context) (string, error) {
		return "charged", nil
	})
	fmt.Println(r.Outcome, "fence", r.Fence)
	rec, _ = in.Inspect(ctx, "", "order-42")
	fmt.Println(rec.State, rec.Notes[0].Text)
	// Output:
	// stuck: order-42 owner worker-7 fence 1
	// started -> retry fence 1 -> 2
	// retry unstick by alice: worker-7 died in the outage
	// SUCCESS fence 3
	// completed unstick by alice: worker-7 died in the outage
}
