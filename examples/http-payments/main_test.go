package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/idemkittest"
)

// POST /charges's handler, through every scenario of the test kit, run as the
// middleware runs it: the engine's context is the request's. A charge is
// created once per run unless the claim was lost first; it is one write and
// idemkit's completion another, so a crash between them (or a store down until
// the lease runs out) creates it again when the client retries: the
// at-least-once bound of plain completion, which only a transactional effect
// closes (see examples/payments-postgres).
func TestCreateChargeWithTheKit(t *testing.T) {
	kit := idemkittest.New[string](t, idemkittest.WithEffects(func() int { return int(seq.Load()) }))
	body := `{"amount":1999,"currency":"eur"}`
	msg := idemkittest.Message{Key: "4f1c2a77-charge-order-42", Payload: []byte(body)}
	handler := func(ctx context.Context) (string, error) {
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/charges", strings.NewReader(body))
		rec := httptest.NewRecorder()
		createCharge(rec, req)
		if ctx.Err() != nil {
			return "", context.Cause(ctx)
		}
		if rec.Code != http.StatusCreated {
			return "", fmt.Errorf("POST /charges: %d %s", rec.Code, rec.Body)
		}
		return rec.Body.String(), nil
	}

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
			t.Errorf("%s: %d charges created in %d runs; plain completion creates two here:\n%s",
				v.Scenario, v.Effects, v.Runs, v.Failure)
		}
	}
}
