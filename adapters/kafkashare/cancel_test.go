package kafkashare_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/kafkashare"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/observe"
	"github.com/idemkit/idemkit/store/memory"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A handler still running when the shutdown grace ends sees its context cancelled
// with the adapter's cause, through the engine's handler context; its record is
// released as interrupted, not counted as an attempt. While it runs its context
// answers the record's delivery count and its message (headers, origin), which
// the engine's events carry too.
func TestHandlerSeesTheAdaptersCancellation(t *testing.T) {
	brokers := shareCluster(t, 1, "payments", "payments.dlq")
	startAtEarliest(t, brokers, "billing")
	acts := newActions()
	store, err := memory.NewStore(consumer.WithScope("payments"), consumer.WithObserver(acts))
	if err != nil {
		t.Fatal(err)
	}
	produceRaw(t, brokers, &kgo.Record{Topic: "payments", Value: []byte("v"), Headers: []kgo.RecordHeader{
		{Key: kafkashare.DefaultKeyHeader, Value: []byte("blocked")}, {Key: "traceparent", Value: []byte("tp-blocked")}}})

	type view struct {
		count   int32
		counted bool
		msg     *observe.Message
	}
	started := make(chan view, 1)
	causes := make(chan error, 1)
	c, err := kafkashare.New(store, shareOpts(brokers, "billing", "payments"),
		func(ctx context.Context, _ *kgo.Record) (int, error) {
			n, ok := kafkashare.DeliveryCount(ctx)
			started <- view{n, ok, observe.MessageOf(ctx)}
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return 0, ctx.Err()
		}, kafkashare.WithShutdownGrace(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	var v view
	select {
	case v = <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler did not start")
	}
	if !v.counted || v.count != 1 {
		t.Errorf("DeliveryCount = %d, %v in the handler; want 1, true", v.count, v.counted)
	}
	if v.msg == nil || v.msg.Headers == nil || v.msg.Headers.Get("traceparent") != "tp-blocked" ||
		v.msg.Origin.Topic != "payments" || v.msg.Origin.DeliveryCount != 1 {
		t.Errorf("message in the handler %+v: want the record's headers and origin", v.msg)
	}
	cancel()
	select {
	case cause := <-causes:
		if cause == nil || cause.Error() != "kafkashare: consumer shutting down" {
			t.Errorf("handler's cause %v, want the shutdown's", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler was not cancelled once the shutdown grace ended")
	}
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	acts.mu.Lock()
	defer acts.mu.Unlock()
	if n := acts.byReason["release/interrupted"]; n != 1 {
		t.Errorf("released as interrupted %d times, want 1 (actions %v)", n, acts.byReason)
	}
	if len(acts.handlerCounts) != 1 || acts.handlerCounts[0] != 1 {
		t.Errorf("delivery counts on the engine's handler events %v, want [1]", acts.handlerCounts)
	}
}
