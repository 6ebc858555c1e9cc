package consumer

import (
	"context"

	"github.com/idemkit/idemkit/internal/observe"
)

// Sources: who ran an execution, as the events name it (the Source field of
// OutcomeEvent, HandlerEvent and the adapters' events).
const (
	SourceExecute  = "execute"  // ExecuteIdempotently and ExecuteBatch called directly
	SourcePipeline = "pipeline" // a Pipeline without WithSource
	SourceKafka    = "kafka"    // the Kafka adapter
	SourceAMQP     = "amqp"     // the RabbitMQ adapter
	SourceHTTP     = "http"     // the HTTP middleware
	SourceReplay   = "replay"   // replay and redrive
)

// sourceOf is the source an event reports: the engine's, unless the engine's is
// SourceExecute and ctx, the context the execution was made with, names another
// (the HTTP middleware names itself so).
func sourceOf(ctx context.Context, engine string) string {
	if engine != SourceExecute || ctx == nil {
		return engine
	}
	if s := observe.SourceOf(ctx); s != "" {
		return s
	}
	return engine
}
