package idemotel_test

import (
	"context"
	"fmt"
	"log"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/contrib/idemotel"
	"github.com/idemkit/idemkit/store/memory"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func Example() {
	// The application's providers; without the options, the global ones are used.
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer tp.Shutdown(context.Background())
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())

	tr, err := idemotel.NewTracer(idemotel.WithTracerProvider(tp), idemotel.WithSystem("kafka"), idemotel.WithDestination("orders"))
	if err != nil {
		log.Fatal(err)
	}
	mt, err := idemotel.NewMeter(idemotel.WithMeterProvider(mp))
	if err != nil {
		log.Fatal(err)
	}
	store, err := memory.NewStore(consumer.WithScope("payments"), consumer.WithObserver(tr, mt))
	if err != nil {
		log.Fatal(err)
	}

	// An adapter puts the delivered message's headers in the context.
	headers := propagation.MapCarrier{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	ctx := consumer.ContextWithCarrier(context.Background(), headers)
	charge := func(context.Context) (string, error) { return "receipt-1", nil }
	consumer.ExecuteIdempotently(ctx, store, "order-42", nil, charge)
	consumer.ExecuteIdempotently(ctx, store, "order-42", nil, charge) // redelivered

	for _, s := range spans.GetSpans() {
		var outcome string
		for _, kv := range s.Attributes {
			if kv.Key == idemotel.OutcomeKey {
				outcome = kv.Value.AsString()
			}
		}
		fmt.Println(s.Name, outcome, "links:", len(s.Links))
	}
	// Output:
	// process orders success links: 1
	// process orders duplicate links: 1
}
