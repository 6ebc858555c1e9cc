package idemkittest_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/idemkittest"
	"github.com/idemkit/idemkit/store/memory"
)

// A handler that charges before idemkit records its completion, run through
// every scenario. Check reports without failing a test; in a test, call
// RequireExactlyOnce (see the Kit example).
func Example() {
	var charges atomic.Int32
	charge := func(ctx context.Context) (string, error) {
		if err := ctx.Err(); err != nil {
			return "", context.Cause(ctx) // its lease was lost: another owner runs it
		}
		charges.Add(1) // the side effect
		return "ch_42", nil
	}
	kit := idemkittest.New[string](nil, idemkittest.WithEffects(func() int { return int(charges.Load()) }))
	report := kit.Check(context.Background(), idemkittest.Message{Key: "charge:order-42", Payload: []byte(`{"cents":1999}`)}, charge)
	fmt.Print(report)
	// Output:
	// pass  duplicate after completion
	// pass  8 concurrent deliveries
	// pass  crash before the handler
	// FAIL  crash after effect, before completion: effect ran 2 times
	// pass  crash after completion, before the ack
	// pass  lease lost mid-handler, second owner runs
	// pass  store down at the claim
	// FAIL  store down at the completion: effect ran 2 times
	// pass  completion applied, reply lost
	// warn  redelivery after the retention: effect ran 2 times
}

// The test a handler's package writes: every scenario, each failure reported
// to t with the scenario, the effect count, why and the fix.
func ExampleKit_RequireExactlyOnce() {
	var t testing.TB // the test's *testing.T
	var charges atomic.Int32
	charge := func(ctx context.Context) (string, error) {
		charges.Add(1)
		return "ch_42", nil
	}
	kit := idemkittest.New[string](t, idemkittest.WithEffects(func() int { return int(charges.Load()) }))
	kit.RequireExactlyOnce(t.Context(), idemkittest.Message{Key: "charge:order-42"}, charge)
}

// One scenario alone.
func ExampleKit_Run() {
	var t testing.TB // the test's *testing.T
	var charges atomic.Int32
	kit := idemkittest.New[string](t, idemkittest.WithEffects(func() int { return int(charges.Load()) }))
	kit.Run(t.Context(), idemkittest.Message{Key: "charge:order-42"}, func(ctx context.Context) (string, error) {
		charges.Add(1)
		return "ch_42", nil
	}, idemkittest.CrashAfterEffect)
}

// The fault layer on its own: the completion is applied and its reply lost;
// idemkit sends it again, the store answers as the first time, and the
// handler ran once.
func ExampleFaultStore() {
	ctx := context.Background()
	store, err := memory.NewStore(consumer.WithScope("payments"))
	if err != nil {
		panic(err)
	}
	fs, err := idemkittest.NewFaultStore(store)
	if err != nil {
		panic(err)
	}
	if err := fs.Inject(idemkittest.Fault{Op: idemkittest.OpSettle, Action: idemkittest.LoseReply}); err != nil {
		panic(err)
	}
	runs := 0
	r := consumer.ExecuteIdempotently(ctx, fs, "charge:order-42", nil, func(context.Context) (string, error) {
		runs++
		return "ch_42", nil
	})
	fmt.Println(r.Outcome, "runs:", runs, "settle calls:", fs.Calls(idemkittest.OpSettle))
	// Output: SUCCESS runs: 1 settle calls: 2
}
