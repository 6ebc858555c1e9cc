package main

import (
	"context"
	"slices"
	"testing"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/idemkittest"
)

// The fulfilment handler, through every scenario of the test kit. It stops
// when its context is cancelled, so a worker that lost its lease reserves
// nothing after its successor did. Reserving stock is one write and idemkit's
// completion another, so a crash between them (or a store down until the lease
// runs out) reserves the stock again on the redelivery: the at-least-once
// bound of plain completion, which only a transactional effect closes (see
// examples/payments-postgres).
func TestFulfilWithTheKit(t *testing.T) {
	var wh *warehouse
	o := Order{OrderID: "o-1", SKU: "sku-1", Qty: 2}
	kit := idemkittest.New[Shipment](t,
		idemkittest.WithReset(func() { wh = &warehouse{reserved: map[string]int{}} }),
		idemkittest.WithEffects(func() int {
			wh.mu.Lock()
			defer wh.mu.Unlock()
			return wh.reserved[o.OrderID] / o.Qty
		}))
	msg := idemkittest.Message{Key: consumer.Key(o.OrderID), Payload: []byte(`{"order_id":"o-1","sku":"sku-1","qty":2}`)}
	handler := func(ctx context.Context) (Shipment, error) { return wh.fulfil(ctx, o) }

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
			t.Errorf("%s: stock reserved %d times in %d runs; plain completion reserves it twice here:\n%s",
				v.Scenario, v.Effects, v.Runs, v.Failure)
		}
	}
}
