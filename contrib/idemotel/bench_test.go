package idemotel_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/contrib/idemotel"
	"github.com/idemkit/idemkit/store/memory"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// BenchmarkBatch is ExecuteBatch of 100 messages on the in-memory store with a
// no-op handler, without and with the tracer and the meter on the SDK (every trace
// sampled or none, spans batched to an exporter that keeps nothing): the plugin's own CPU
// per batch, without a network.
func BenchmarkBatch(b *testing.B) {
	for _, c := range []struct {
		name          string
		tracer, meter bool
		sampler       sdktrace.Sampler
	}{
		{"off", false, false, nil},
		{"tracer", true, false, sdktrace.AlwaysSample()},
		{"tracer-unsampled", true, false, sdktrace.NeverSample()},
		{"tracer-10%", true, false, sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.1))},
		{"meter", false, true, nil},
		{"both", true, true, sdktrace.AlwaysSample()},
	} {
		b.Run(c.name, func(b *testing.B) {
			var obs []consumer.Observer
			if c.tracer {
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()), sdktrace.WithSampler(c.sampler))
				defer tp.Shutdown(context.Background())
				tr, err := idemotel.NewTracer(idemotel.WithTracerProvider(tp))
				if err != nil {
					b.Fatal(err)
				}
				obs = append(obs, tr)
			}
			if c.meter {
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
				defer mp.Shutdown(context.Background())
				mt, err := idemotel.NewMeter(idemotel.WithMeterProvider(mp))
				if err != nil {
					b.Fatal(err)
				}
				obs = append(obs, mt)
			}
			store, err := memory.NewStore(consumer.WithObserver(obs...))
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

// BenchmarkSDKSpan is one span of the OpenTelemetry SDK alone, started with seven
// attributes, given three more and ended, through a batch span processor to an
// exporter that keeps nothing: the floor under a sampled execution's span.
func BenchmarkSDKSpan(b *testing.B) {
	for _, c := range []struct {
		name    string
		sampler sdktrace.Sampler
	}{{"sampled", sdktrace.AlwaysSample()}, {"unsampled", sdktrace.NeverSample()}} {
		b.Run(c.name, func(b *testing.B) {
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()), sdktrace.WithSampler(c.sampler))
			defer tp.Shutdown(context.Background())
			tr := tp.Tracer("bench")
			start := []attribute.KeyValue{attribute.String("a", "1"), attribute.String("b", "2"), attribute.String("c", "3"),
				attribute.Int("d", 4), attribute.Int64("e", 5), attribute.String("f", "6"), attribute.String("g", "7")}
			more := []attribute.KeyValue{attribute.String("h", "8"), attribute.String("i", "9"), attribute.String("j", "10")}
			b.ReportAllocs()
			for b.Loop() {
				_, s := tr.Start(context.Background(), "process", trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(start...))
				s.SetAttributes(more...)
				s.End()
			}
		})
	}
}
