// Package observe is the plumbing between idemkit's entry points and the
// observers of package consumer, kept out of the public API: what an adapter tells
// the engine about the message an execution runs for (its headers, where it came
// from, who runs it), carried in the context the execution is made with, and the
// loop that hands an adapter's own events (retries, dead letters, commits, acks,
// pauses) to the observers that take them.
//
// It imports nothing of idemkit, so that package consumer can import it.
package observe

import "context"

// Carrier gives read access to a message's headers; consumer.Carrier has the same
// methods, so either converts to the other.
type Carrier interface {
	Get(key string) string
	Keys() []string
}

// Origin is where a message came from, field for field as consumer.Origin, which
// converts from it (so the compiler keeps the two alike).
type Origin struct {
	Topic         string
	Partition     int32
	Offset        int64
	Queue         string
	DeliveryTag   uint64
	DeliveryCount int32
}

// Message is what an adapter knows of the message an execution runs for.
type Message struct {
	Headers Carrier // nil when the message has none worth reading
	Origin  Origin
}

type messageKey struct{}

// WithMessage returns ctx holding m: the engine reports m's origin on the
// execution's events, and gives tracers its headers.
func WithMessage(ctx context.Context, m *Message) context.Context {
	return context.WithValue(ctx, messageKey{}, m)
}

// MessageKey is the key WithMessage stores a message under. An adapter whose
// per-message context is a type of its own answers it from that type's Value, so
// that carrying the message costs no context.WithValue per message.
func MessageKey() any { return messageKey{} }

// MessageOf returns the message ctx holds (WithMessage), or nil.
func MessageOf(ctx context.Context) *Message {
	m, _ := ctx.Value(messageKey{}).(*Message)
	return m
}

// SourceKey is the context key of WithSource; package consumer hides it from the
// contexts of handlers (an execution a handler starts is its own).
type SourceKey struct{}

// WithSource returns ctx naming source as who runs the executions made with it,
// for ExecuteIdempotently and ExecuteBatch, which report it in their events
// instead of consumer.SourceExecute. The HTTP middleware uses it.
func WithSource(ctx context.Context, source string) context.Context {
	return context.WithValue(ctx, SourceKey{}, source)
}

// SourceOf returns the source ctx names (WithSource), or "".
func SourceOf(ctx context.Context) string {
	s, _ := ctx.Value(SourceKey{}).(string)
	return s
}

// Each calls fn with every observer in obs that implements the hook H: adapters
// report their own events with it, as in
//
//	observe.Each(s.Observers, func(h consumer.RetryHook) { h.OnRetry(e) })
func Each[H, O any](obs []O, fn func(H)) {
	for _, o := range obs {
		if h, ok := any(o).(H); ok {
			fn(h)
		}
	}
}
