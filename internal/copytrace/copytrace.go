// Package copytrace writes trace context onto the copies the broker adapters
// produce from a delivered message (Kafka dead letters, RabbitMQ retry and
// dead-letter copies), through the tracers among a store's observers
// (consumer.TraceHook, such as contrib/idemotel's Tracer): one place decides how a
// copy gets its trace context, so that every adapter's copies carry it alike.
//
// An adapter calls Inject with the handler's context of the delivery's last run,
// so that the copy carries that execution's span, or, when no handler ran, with a
// context holding only the delivered message (observe.WithMessage), so that the
// copy carries the message's own trace context. A tracer that panics costs the
// copy its trace context, never the copy itself.
package copytrace

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/observe"
)

// Inject writes the trace context of ctx into a copy's headers through set, with
// every consumer.TraceHook in obs, in their order (none: nothing is written). set
// replaces a header of the same name. Given the handler's context, a tracer writes
// the execution's span; given a context holding only the delivered message
// (observe.WithMessage), it writes that message's own trace context, if its
// headers had one.
//
// A tracer's writes reach set only once its Inject returned: one that panics is
// recovered, logged once at Error on log (nil: not logged) with its panic value
// and stack, and writes nothing, so the copy goes on without that tracer's trace
// context and never with half of it. The other tracers write as usual.
func Inject(ctx context.Context, log *slog.Logger, obs []consumer.Observer, set func(key, value string)) {
	var kv []string // one tracer's writes, pairs of key and value
	observe.Each(obs, func(h consumer.TraceHook) {
		kv = kv[:0]
		if !inject(ctx, log, h, &kv) {
			return
		}
		for i := 0; i+1 < len(kv); i += 2 {
			set(kv[i], kv[i+1])
		}
	})
}

// inject runs h's Inject, collecting its writes in kv; it reports whether h
// returned, rather than panicked.
func inject(ctx context.Context, log *slog.Logger, h consumer.TraceHook, kv *[]string) (ok bool) {
	defer func() {
		if p := recover(); p != nil {
			ok = false
			if log != nil {
				log.Error("idemkit: a tracer's Inject panicked; the copy goes without its trace context",
					"tracer", fmt.Sprintf("%T", h), "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			}
		}
	}()
	h.Inject(ctx, func(key, value string) { *kv = append(*kv, key, value) })
	return true
}
