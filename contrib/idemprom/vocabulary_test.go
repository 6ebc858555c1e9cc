package idemprom_test

import (
	"context"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/contrib/idemprom"
	"github.com/idemkit/idemkit/internal/observertest"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Every label value of every metric, after every kind of event, is one of the
// vocabulary's (telemetry.LabelValues): one spelling of each source, outcome,
// action, kind, answer, op and state across all metrics.
func TestEveryLabelIsInTheVocabulary(t *testing.T) {
	states := idemprom.StateCounterFunc(func(context.Context) (map[string]int64, bool, error) {
		return map[string]int64{"started": 1, "completed": 20, "failed": 2, "retry": 3}, false, nil
	})
	m, reg := newMetrics(t, idemprom.WithStateCounter(observertest.Scope, states))
	observertest.EveryEvent(t, m)

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	labels := observertest.NewLabels(t)
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range s.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			labels.Check(mf.GetName(), l)
		}
	}
	// Every value an event can carry was seen; corrupt records, configuration
	// errors and undecodable stored results are not made here.
	labels.Covers([]string{"source", "outcome", "action", "kind", "answer", "op", "state"},
		"kind=corrupt", "kind=config", "kind=unknown")
	if t.Failed() {
		t.Logf("label values seen: %v", labels)
	}
}

// A claim that takes a crashed worker's record over is counted, and a handler
// that then finds its effect already applied is no handler error.
func TestTakeoverOfACrashedClaim(t *testing.T) {
	m, reg := newMetrics(t)
	observertest.Takeover(t, m)
	want := `
# HELP idemkit_claim_takeovers_total Claims that took over a record whose owner crashed or stalled (its lease ran out, or its lock holder was gone); counted as claimed too.
# TYPE idemkit_claim_takeovers_total counter
idemkit_claim_takeovers_total{scope="orders"} 1
# HELP idemkit_outcomes_total Messages by the outcome of their execution.
# TYPE idemkit_outcomes_total counter
idemkit_outcomes_total{action="ack",kind="none",outcome="duplicate",scope="orders",source="execute"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "idemkit_claim_takeovers_total", "idemkit_outcomes_total"); err != nil {
		t.Fatal(err)
	}
	if n := histogramCount(t, reg, "idemkit_handler_duration_seconds", map[string]string{"scope": "orders", "kind": "none"}); n != 1 {
		t.Fatalf("%d handler runs without an error kind, want 1 (the handler that found its effect applied)", n)
	}
	if n := testutil.CollectAndCount(m, "idemkit_handler_duration_seconds"); n != 1 {
		t.Fatalf("%d handler-duration series, want 1 (kind none)", n)
	}
}

// The HTTP middleware's executions are counted under source http, and a key
// reused with another request (422) under action reject.
func TestHTTPSourceAndReject(t *testing.T) {
	m, reg := newMetrics(t)
	observertest.HTTP(t, m)
	want := `
# HELP idemkit_outcomes_total Messages by the outcome of their execution.
# TYPE idemkit_outcomes_total counter
idemkit_outcomes_total{action="reject",kind="conflict",outcome="error",scope="api",source="http"} 1
idemkit_outcomes_total{action="ack",kind="none",outcome="duplicate",scope="api",source="http"} 1
idemkit_outcomes_total{action="ack",kind="none",outcome="success",scope="api",source="http"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "idemkit_outcomes_total"); err != nil {
		t.Fatal(err)
	}
}
