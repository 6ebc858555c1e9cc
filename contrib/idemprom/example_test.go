package idemprom_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/contrib/idemprom"
	"github.com/idemkit/idemkit/store/memory"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func Example() {
	m, err := idemprom.New()
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry() // or prometheus.MustRegister(m), served by promhttp.Handler()
	reg.MustRegister(m)

	// A Redis store (store/redis) in production; the observer is the same.
	store, err := memory.NewStore(consumer.WithScope("payments"), consumer.WithObserver(m))
	if err != nil {
		log.Fatal(err)
	}
	charge := func(context.Context) (string, error) { return "receipt-1", nil }
	consumer.ExecuteIdempotently(context.Background(), store, "order-42", nil, charge)
	consumer.ExecuteIdempotently(context.Background(), store, "order-42", nil, charge) // redelivered

	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "idemkit_outcomes_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			fmt.Println(strings.Join(labels, " "), s.GetCounter().GetValue())
		}
	}
	// Output:
	// action=ack kind=none outcome=duplicate scope=payments source=execute 1
	// action=ack kind=none outcome=success scope=payments source=execute 1
}

// Record counts by state come from any StateCounter; the operator plane's
// inspector counts them with bounded scan steps.
func ExampleWithStateCounter() {
	counter := idemprom.StateCounterFunc(func(ctx context.Context) (map[string]int64, bool, error) {
		// e.g. st, err := inspector.Stats(ctx, admin.StatsQuery{Scope: "payments", MaxRecords: 100_000})
		return map[string]int64{"completed": 1200, "started": 3}, false, nil
	})
	m, err := idemprom.New(idemprom.WithStateCounter("payments", counter))
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	n, _ := testutil.GatherAndCount(reg, "idemkit_records")
	fmt.Println(n, "series")
	// Output: 2 series
}
