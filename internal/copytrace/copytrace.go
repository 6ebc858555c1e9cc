// Package copytrace writes trace context onto the copies the broker adapters
// produce from a delivered message (Kafka dead letters, RabbitMQ retry and
// dead-letter copies), through the tracers among a store's observers
// (consumer.TraceHook, such as contrib/idemotel's Tracer): one place decides how a
// copy gets its trace context, so that every adapter's copies carry it alike.
package copytrace

import (
	"context"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/observe"
)

// Inject writes the trace context of ctx into a copy's headers through set, with
// every consumer.TraceHook in obs (none: nothing is written). set replaces a header
// of the same name. Given the handler's context, a tracer writes the execution's
// span; given a context holding only the delivered message (observe.WithMessage),
// it writes that message's own trace context, if its headers had one.
func Inject(ctx context.Context, obs []consumer.Observer, set func(key, value string)) {
	observe.Each(obs, func(h consumer.TraceHook) { h.Inject(ctx, set) })
}
