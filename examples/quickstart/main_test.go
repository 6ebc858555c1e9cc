package main

import (
	"context"
	"slices"
	"testing"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/idemkittest"
)

// The members' handler, through every scenario of the test kit. It stops when
// its context is cancelled, so a member that lost its lease charges nothing
// after the member that took the order over. The charge is one write and
// idemkit's completion another, so a crash between them (or a store down until
// the lease runs out) charges the order again on the redelivery: the one
// window of plain completion, which the demo leaves out on purpose (its doomed
// member dies once its charges are recorded) and a transactional effect closes
// (see examples/payments-postgres).
func TestChargeWithTheKit(t *testing.T) {
	var book *ledger
	o := order{ID: orderID(42), Amount: 142}
	kit := idemkittest.New[string](t,
		idemkittest.WithReset(func() { book = &ledger{charges: map[string]int{}} }),
		idemkittest.WithEffects(func() int {
			book.mu.Lock()
			defer book.mu.Unlock()
			return book.charges[o.ID]
		}))
	msg := idemkittest.Message{Key: consumer.Key(o.ID), Payload: []byte(`{"id":"order-00042","amount":142}`)}
	handler := func(ctx context.Context) (string, error) { return book.handle(ctx, o) }

	atLeastOnce := []idemkittest.Scenario{idemkittest.CrashAfterEffect, idemkittest.StoreDownAtCompletion}
	var others []idemkittest.Scenario
	for _, s := range idemkittest.Scenarios() {
		if !slices.Contains(atLeastOnce, s) {
			others = append(others, s)
		}
	}
	kit.Run(context.Background(), msg, handler, others...) // after the retention: a warning, logged

	rep := kit.Check(context.Background(), msg, handler, atLeastOnce...)
	for _, v := range rep.Verdicts {
		if v.Effects != 2 || v.Runs != 2 {
			t.Errorf("%s: the order was charged %d times in %d runs; plain completion charges it twice here:\n%s",
				v.Scenario, v.Effects, v.Runs, v.Failure)
		}
	}
}
