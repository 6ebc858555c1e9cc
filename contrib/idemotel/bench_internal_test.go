package idemotel

import (
	"context"
	"strconv"
	"testing"

	"github.com/idemkit/idemkit/consumer"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// BenchmarkTracerHooks is the Tracer's part of one execution, without the core:
// the handler's span started and ended, and the outcome added, with no trace
// sampled and with 10% sampled.
func BenchmarkTracerHooks(b *testing.B) {
	for _, c := range []struct {
		name string
		smp  sdktrace.Sampler
	}{{"unsampled", sdktrace.NeverSample()}, {"10%", sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.1))}} {
		smp := c.smp
		b.Run(c.name, func(b *testing.B) {
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()), sdktrace.WithSampler(smp))
			defer tp.Shutdown(context.Background())
			tr, _ := NewTracer(WithTracerProvider(tp))
			keys := make([]consumer.Key, 1000)
			for i := range keys {
				keys[i] = consumer.Key("key-" + strconv.Itoa(i))
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				k := keys[i%1000]
				i++
				e := consumer.HandlerEvent{Scope: "s", Key: k, Attempt: 1, Fence: int64(i)}
				_, end := tr.StartHandler(context.Background(), e)
				end(e)
				tr.OnOutcome(consumer.OutcomeEvent{Source: "execute", Scope: "s", Key: k, Outcome: consumer.Success, Action: consumer.Ack, Attempt: 1, Fence: int64(i)})
			}
		})
	}
}
