package admin_test

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/store/memory"
)

// A replica died holding three claims: preview what unsticking its claims would
// change, then execute the plan, each record on the fence the preview saw.
func ExampleInspector_Preview() {
	ctx := context.Background()
	store, _ := memory.NewStore(consumer.WithScope("payments"), consumer.WithLease(time.Hour))
	for _, c := range []consumer.Claim{{Key: "order-1", Owner: "replica-7-1"}, {Key: "order-2", Owner: "replica-7-2"},
		{Key: "order-3", Owner: "replica-7-3"}, {Key: "order-4", Owner: "replica-3-1"}} {
		store.Begin(ctx, []consumer.Claim{c})
	}
	in, _ := admin.New(store)
	plan, err := in.Preview(ctx, admin.Bulk{Op: consumer.OpUnstick, Filter: admin.Filter{OwnerPrefix: "replica-7-"},
		Actor: "alice", Reason: "replica-7 died"})
	if err != nil {
		panic(err)
	}
	fmt.Println("would unstick", plan.Count)
	rep, err := in.Execute(ctx, plan)
	if err != nil {
		panic(err)
	}
	fmt.Println("applied", rep.Applied, "moved", rep.Moved)
	// Output:
	// would unstick 3
	// applied 3 moved 0
}
