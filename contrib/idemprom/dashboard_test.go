package idemprom_test

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/contrib/idemprom"
	"github.com/prometheus/client_golang/prometheus"
)

// The Grafana dashboard in examples/grafana queries only metrics that Metrics
// exports, with only their labels.
func TestDashboardMatchesTheMetrics(t *testing.T) {
	b, err := os.ReadFile("../../examples/grafana/idemkit.json")
	if os.IsNotExist(err) {
		t.Skip("no examples/grafana/idemkit.json beside this module (not a checkout of the repository)")
	}
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Targets []struct{ Expr string } `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}

	m, err := idemprom.New(idemprom.WithStateCounter("s", idemprom.StateCounterFunc(
		func(context.Context) (map[string]int64, bool, error) { return nil, false, nil })))
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *prometheus.Desc, 100)
	m.Describe(ch)
	close(ch)
	labels := map[string][]string{} // metric name: its labels
	descRE := regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)
	for d := range ch {
		sm := descRE.FindStringSubmatch(d.String())
		if sm == nil {
			t.Fatalf("cannot read %s", d)
		}
		labels[sm[1]] = strings.Split(sm[2], ",")
	}

	nameRE := regexp.MustCompile(`(idemkit_[a-z_]+)(\{[^}]*\})?`)
	labelRE := regexp.MustCompile(`([a-z_]+)\s*=~?`)
	var queries int
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			queries++
			for _, sm := range nameRE.FindAllStringSubmatch(tg.Expr, -1) {
				name := sm[1]
				for _, suffix := range []string{"_bucket", "_count", "_sum"} {
					if base, ok := strings.CutSuffix(name, suffix); ok && labels[base] != nil {
						name = base
					}
				}
				have, ok := labels[name]
				if !ok {
					t.Errorf("the dashboard queries %s, which Metrics does not export (query %q)", sm[1], tg.Expr)
					continue
				}
				for _, l := range labelRE.FindAllStringSubmatch(sm[2], -1) {
					if !contains(have, l[1]) && !(l[1] == "le" && strings.HasSuffix(sm[1], "_bucket")) {
						t.Errorf("the dashboard selects %s on %s, whose labels are %v", l[1], name, have)
					}
				}
			}
		}
	}
	if queries < 20 {
		t.Fatalf("%d queries in the dashboard; the file seems cut short", queries)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
