package kafkashare

import (
	"context"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/copytrace"
	"github.com/idemkit/idemkit/internal/kafkadl"
	"github.com/idemkit/idemkit/internal/observe"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Source names the adapter in the events it and the engine report
// (OutcomeEvent.Source, HandlerEvent.Source, DeadLetterEvent.Source...).
const Source = "kafka-share"

// The adapter's own hooks. Install them like the core's, with
// consumer.WithObserver on the store: the one registry of idemkit's events. An
// observer implements any of them.

// ShareActionHook is told of every acknowledgement the adapter gives a record:
// ACCEPT, RELEASE, REJECT, and each RENEW round of the records it holds.
type ShareActionHook interface{ OnShareAction(ShareActionEvent) }

// ShareAckHook is told of the broker's answer to the member's acknowledgements,
// per partition, as kgo.ShareAckCallback reports them: Err set when the broker
// refused them or they could not be delivered (their records are then
// redelivered once their acquisition locks run out).
type ShareAckHook interface{ OnShareAck(ShareAckEvent) }

// DeliveryLimitHook is told of every record delivered for the last time or the
// one before (its DeliveryCount at WithDeliveryLimit or one below): a record
// cycling towards the broker's archive. The adapter logs a warning too.
type DeliveryLimitHook interface{ OnDeliveryLimitNear(ShareActionEvent) }

// ShareActionEvent describes one acknowledgement of one record.
type ShareActionEvent struct {
	Source string
	Scope  string
	Key    consumer.Key // "" when the record had no usable key
	consumer.Origin
	// DeliveryCount is the broker's delivery count of the record: 1 on its first
	// delivery, one more for every release or lock expiry.
	DeliveryCount int32
	Limit         int32         // WithDeliveryLimit
	Status        kgo.AckStatus // accept, release, reject or renew
	// Reason says why: "success", "duplicate", "dead-lettered", "broker-dead-letter",
	// "busy", "retry", "interrupted", "lock-expiring", "shutdown", "renew".
	Reason string
}

// ShareAckEvent is the broker's answer for one partition's acknowledgements.
type ShareAckEvent struct {
	Source          string
	Scope           string
	consumer.Origin       // Topic and Partition
	Err             error // nil: the broker applied them
}

type deliveryKey struct{}

// DeliveryCount returns, inside a handler, the broker's delivery count of the
// record it runs for: 1 on the first delivery. ok is false outside a handler of
// this adapter.
func DeliveryCount(ctx context.Context) (n int32, ok bool) {
	n, ok = ctx.Value(deliveryKey{}).(int32)
	return n, ok
}

// origin is rec's origin on the events, its delivery count included.
func origin(rec *kgo.Record) consumer.Origin {
	return consumer.Origin{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, DeliveryCount: rec.DeliveryCount()}
}

// submission is the context one submission of a record is given to the engine
// with, which its handler's context derives from: a cancellable child of the
// poll's base (cancelled with its cause when the record's lock is about to run
// out or the shutdown grace ends), answering the record's delivery count for
// DeliveryCount, its message (headers, origin) for the engine's events and
// tracers, and the record itself for the consumer's one Run function
// (Consumer.runHeld) and the poll's one DoneContext function (poll.settled), so
// that a submission costs this value and its cancellable context, and neither a
// context.WithValue nor a closure.
//
// Any other key goes to the embedded context, package context's own included: a
// context derived from a submission (the engine's handler context) is registered
// with its cancellable context as that context's child, as it would be with the
// cancellable context itself, and no goroutine watches the submission.
type submission[V any] struct {
	context.Context                         // context.WithCancelCause(poll.base)
	h               *held[V]                // the record
	cancel          context.CancelCauseFunc // cancels the embedded context
}

// heldKey is the context key a submission answers its record for.
type heldKey struct{}

// messageKey is the context key of the message the engine reports on its events
// and tracers read (observe.WithMessage's): a submission answers its record's.
var messageKey = observe.MessageKey()

// Value answers the record for heldKey, its delivery count for deliveryKey, its
// message for messageKey, and asks the embedded context for anything else.
func (s *submission[V]) Value(key any) any {
	switch {
	case key == heldKey{}:
		return s.h
	case key == deliveryKey{}:
		return s.h.count
	case key == messageKey:
		return &s.h.msg
	}
	return s.Context.Value(key)
}

// recordHeaders reads a record's headers as an observe.Carrier: a pointer, so
// that carrying it costs no allocation.
type recordHeaders kgo.Record

func (h *recordHeaders) Get(key string) string { return kafkadl.Headers(h.Headers).Get(key) }

func (h *recordHeaders) Keys() []string { return kafkadl.Headers(h.Headers).Keys() }

// message is rec's message for the engine's events and tracers.
func message(rec *kgo.Record) observe.Message {
	return observe.Message{Headers: (*recordHeaders)(rec), Origin: observe.Origin(origin(rec))}
}

func (c *Consumer[V, T]) reportAction(h *held[V], status kgo.AckStatus, reason string) {
	e := ShareActionEvent{Source: Source, Scope: c.s.Scope, Key: h.key, Origin: origin(h.rec),
		DeliveryCount: h.count, Limit: c.cfg.deliveryLimit, Status: status, Reason: reason}
	observe.Each(c.s.Observers, func(x ShareActionHook) { x.OnShareAction(e) })
}

func (c *Consumer[V, T]) reportNearLimit(h *held[V]) {
	e := ShareActionEvent{Source: Source, Scope: c.s.Scope, Key: h.key, Origin: origin(h.rec),
		DeliveryCount: h.count, Limit: c.cfg.deliveryLimit}
	observe.Each(c.s.Observers, func(x DeliveryLimitHook) { x.OnDeliveryLimitNear(e) })
}

func (c *Consumer[V, T]) reportShareAck(r kgo.ShareAckResult) {
	e := ShareAckEvent{Source: Source, Scope: c.s.Scope, Origin: consumer.Origin{Topic: r.Topic, Partition: r.Partition}, Err: r.Err}
	observe.Each(c.s.Observers, func(x ShareAckHook) { x.OnShareAck(e) })
}

func (c *Consumer[V, T]) reportDeadLetter(e consumer.DeadLetterEvent) {
	e.Source, e.Scope = Source, c.s.Scope
	observe.Each(c.s.Observers, func(x consumer.DeadLetterHook) { x.OnDeadLetter(e) })
}

func (c *Consumer[V, T]) reportRetry(e consumer.RetryEvent) {
	e.Source, e.Scope = Source, c.s.Scope
	observe.Each(c.s.Observers, func(x consumer.RetryHook) { x.OnRetry(e) })
}

// injectTrace writes the trace context of ctx into a produced copy's headers
// through set, with every consumer.TraceHook of the store (copytrace.Inject); a
// tracer that panics is logged on the consumer's logger and writes nothing.
func (c *Consumer[V, T]) injectTrace(ctx context.Context, set func(key, value string)) {
	copytrace.Inject(ctx, c.log, c.s.Observers, set)
}
