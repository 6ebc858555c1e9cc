package main

import (
	"context"
	"slices"
	"testing"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/idemkittest"
)

// The payments handler, through every scenario of the test kit. The gateway
// refuses a write whose fence is not newer than the last, so a worker that lost
// its lease cannot charge after its successor: it passes the lease-lost
// scenario. The charge itself is one call and idemkit's completion another, so
// a crash between them (or a store down until the lease runs out) charges the
// card again on the redelivery: the at-least-once bound of plain completion,
// which only a transactional effect closes (see examples/payments-postgres).
// After the retention the record is new, its fence restarts at 1 and the
// gateway refuses the write as stale: the kit logs that as a warning.
func TestChargeWithTheKit(t *testing.T) {
	var gw *gateway
	p := PaymentRequested{PaymentID: "pay-1", Card: "4242", Cents: 1999}
	kit := idemkittest.New[Charge](t,
		idemkittest.WithReset(func() { gw = &gateway{fences: map[string]int64{}, cents: map[string]int{}} }),
		idemkittest.WithEffects(func() int {
			gw.mu.Lock()
			defer gw.mu.Unlock()
			return gw.cents[p.PaymentID] / p.Cents
		}))
	msg := idemkittest.Message{Key: consumer.Key("payment:" + p.PaymentID), Payload: []byte(`{"payment_id":"pay-1","card":"4242","cents":1999}`)}
	handler := func(ctx context.Context) (Charge, error) { return gw.charge(ctx, p) }

	atLeastOnce := []idemkittest.Scenario{idemkittest.CrashAfterEffect, idemkittest.StoreDownAtCompletion}
	var others []idemkittest.Scenario
	for _, s := range idemkittest.Scenarios() {
		if !slices.Contains(atLeastOnce, s) {
			others = append(others, s)
		}
	}
	kit.Run(context.Background(), msg, handler, others...)

	rep := kit.Check(context.Background(), msg, handler, atLeastOnce...)
	for _, v := range rep.Verdicts {
		if v.Effects != 2 || v.Runs != 2 {
			t.Errorf("%s: the card was charged %d times in %d runs; plain completion charges it twice here:\n%s",
				v.Scenario, v.Effects, v.Runs, v.Failure)
		}
	}
}
