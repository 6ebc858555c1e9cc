package nethttp_test

import (
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/telemetry"
)

// outcomes records what the store's observers are told of outcomes, as
// source/outcome/action/kind labels.
type outcomes struct {
	mu  sync.Mutex
	got []string
}

func (o *outcomes) OnOutcome(e consumer.OutcomeEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, strings.Join([]string{e.Source, telemetry.OutcomeLabel(e.Outcome),
		telemetry.ActionLabel(e.Source, e.Action), telemetry.KindLabel(e.Kind)}, "/"))
}

// The middleware's executions are reported as source http, and a key reused with
// another request (422) as rejected: HTTP has no dead-letter destination.
func TestObserversSeeTheHTTPSource(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore storeFactory) {
		obs := &outcomes{}
		runs := &counter{}
		srv := serve(t, newStore(t, consumer.WithObserver(obs)), chargeHandler(runs))
		for _, c := range []struct {
			body   string
			status int
		}{{`{"amount":10}`, http.StatusCreated}, {`{"amount":10}`, http.StatusCreated}, {`{"amount":99}`, http.StatusUnprocessableEntity}} {
			if r := srv.do(t, req{Key: quoted("order-1"), Body: c.body}); r.Status != c.status {
				t.Fatalf("status %d, want %d: %s", r.Status, c.status, r.Body)
			}
		}
		obs.mu.Lock()
		defer obs.mu.Unlock()
		sort.Strings(obs.got)
		want := []string{"http/duplicate/ack/none", "http/error/reject/conflict", "http/success/ack/none"}
		if strings.Join(obs.got, " ") != strings.Join(want, " ") || runs.load() != 1 {
			t.Fatalf("outcomes %v after %d runs, want %v after 1", obs.got, runs.load(), want)
		}
	})
}
