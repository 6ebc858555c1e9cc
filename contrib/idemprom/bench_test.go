package idemprom_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/contrib/idemprom"
	"github.com/idemkit/idemkit/store/memory"
	"github.com/prometheus/client_golang/prometheus"
)

// emptyHooks implements every hook the core reports and does nothing: what the
// core's reporting costs by itself.
type emptyHooks struct{}

func (emptyHooks) OnClaim(consumer.ClaimEvent)          {}
func (emptyHooks) OnHandlerStart(consumer.HandlerEvent) {}
func (emptyHooks) OnHandlerEnd(consumer.HandlerEvent)   {}
func (emptyHooks) OnLeaseRenewed(consumer.LeaseEvent)   {}
func (emptyHooks) OnLeaseLost(consumer.LeaseEvent)      {}
func (emptyHooks) OnSettle(consumer.SettleEvent)        {}
func (emptyHooks) OnOutcome(consumer.OutcomeEvent)      {}

// BenchmarkBatch is ExecuteBatch of 100 messages on the in-memory store with a
// no-op handler: without an observer, with an observer of every hook that does
// nothing (the core's own cost of reporting), and with Metrics.
func BenchmarkBatch(b *testing.B) {
	m, err := idemprom.New()
	if err != nil {
		b.Fatal(err)
	}
	prometheus.NewRegistry().MustRegister(m)
	for _, c := range []struct {
		name string
		obs  []consumer.Observer
	}{{"off", nil}, {"empty-hooks", []consumer.Observer{emptyHooks{}}}, {"metrics", []consumer.Observer{m}}} {
		b.Run(c.name, func(b *testing.B) {
			store, err := memory.NewStore(consumer.WithObserver(c.obs...))
			if err != nil {
				b.Fatal(err)
			}
			items := make([]consumer.BatchItem, 100)
			h := func(context.Context, int, consumer.BatchItem) (int, error) { return 0, nil }
			b.ReportAllocs()
			for n := 0; b.Loop(); n++ {
				for i := range items {
					items[i] = consumer.BatchItem{Key: consumer.Key(fmt.Sprint("k-", n, "-", i))}
				}
				consumer.ExecuteBatch(context.Background(), store, items, h)
			}
		})
	}
}
