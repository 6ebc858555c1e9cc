package idemotel_test

import (
	"context"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/contrib/idemotel"
	"github.com/idemkit/idemkit/internal/observertest"
	"go.opentelemetry.io/otel/codes"
)

// attrMap reads "k=v,k=v" back into a map.
func attrMap(s string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out[k] = v
		}
	}
	return out
}

// Every attribute value of every instrument and span, after every kind of event,
// is one of the vocabulary's (telemetry.LabelValues): one spelling of each source,
// outcome, action, kind, answer, op and state, the Prometheus plugin's.
func TestEveryLabelIsInTheVocabulary(t *testing.T) {
	states := idemotel.StateCounterFunc(func(context.Context) (map[string]int64, bool, error) {
		return map[string]int64{"started": 1, "completed": 20, "failed": 2, "retry": 3}, false, nil
	})
	m, reader := newMeter(t, idemotel.WithStateCounter(observertest.Scope, states))
	tr, exp, _ := newTracer(t)
	observertest.EveryEvent(t, m, tr)

	labels := observertest.NewLabels(t)
	for name, series := range collect(t, reader) {
		for attrs := range series {
			labels.Check(name, attrMap(attrs))
		}
	}
	spanAttr := map[string]string{"idemkit.source": "source", "idemkit.outcome": "outcome", "idemkit.action": "action",
		"error.type": "kind"}
	for _, s := range exp.GetSpans() {
		l := map[string]string{}
		for k, v := range attrs(s) {
			if name, ok := spanAttr[string(k)]; ok {
				l[name] = v
			}
		}
		if s.Status.Code == codes.Error {
			l["kind"] = s.Status.Description
		}
		labels.Check("span "+attrs(s)["idemkit.key"], l)
	}
	labels.Covers([]string{"source", "outcome", "action", "kind", "answer", "op", "state"},
		"kind=corrupt", "kind=config", "kind=unknown")
	if t.Failed() {
		t.Logf("attribute values seen: %v", labels)
	}
}

// A claim that takes a crashed worker's record over is counted, and a handler
// that then finds its effect already applied is no handler error.
func TestTakeoverOfACrashedClaim(t *testing.T) {
	m, reader := newMeter(t)
	observertest.Takeover(t, m)
	c := collect(t, reader)
	c.expect(t, "idemkit.claim.takeovers", map[string]float64{"scope=orders": 1})
	c.expect(t, "idemkit.outcomes", map[string]float64{"action=ack,kind=none,outcome=duplicate,scope=orders,source=execute": 1})
	c.expect(t, "idemkit.handler.duration", map[string]float64{"kind=none,scope=orders": 1})
}

// The HTTP middleware's executions are counted under source http, and a key
// reused with another request (422) under action reject.
func TestHTTPSourceAndReject(t *testing.T) {
	m, reader := newMeter(t)
	observertest.HTTP(t, m)
	collect(t, reader).expect(t, "idemkit.outcomes", map[string]float64{
		"action=reject,kind=conflict,outcome=error,scope=api,source=http": 1,
		"action=ack,kind=none,outcome=duplicate,scope=api,source=http":    1,
		"action=ack,kind=none,outcome=success,scope=api,source=http":      1,
	})
}
