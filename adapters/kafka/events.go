package kafka

import (
	"context"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/copytrace"
	"github.com/idemkit/idemkit/internal/observe"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The adapter reports to the observers of its store (consumer.WithObserver):
// every record's execution through the engine (HandlerEvent, OutcomeEvent, with
// the record's topic, partition and offset as their Origin), and its own
// events: retries in place (consumer.RetryHook), confirmed dead-letter copies
// (DeadLetterHook), commits and failed commits (CommitHook), and topics stopped
// and resumed over their dead-letter topics (PauseHook).

// origin is rec's origin on the events.
func origin(rec *kgo.Record) consumer.Origin {
	return consumer.Origin{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset}
}

// messageContext returns ctx holding rec's headers and origin, for the engine's
// events and for tracers.
func messageContext(ctx context.Context, rec *kgo.Record) context.Context {
	return observe.WithMessage(ctx, &observe.Message{Headers: headers(rec.Headers), Origin: observe.Origin(origin(rec))})
}

func (c *Consumer[V, T]) reportRetry(e consumer.RetryEvent) {
	e.Source, e.Scope = consumer.SourceKafka, c.s.Scope
	observe.Each(c.s.Observers, func(h consumer.RetryHook) { h.OnRetry(e) })
}

func (c *Consumer[V, T]) reportDeadLetter(e consumer.DeadLetterEvent) {
	e.Source, e.Scope = consumer.SourceKafka, c.s.Scope
	observe.Each(c.s.Observers, func(h consumer.DeadLetterHook) { h.OnDeadLetter(e) })
}

func (c *Consumer[V, T]) reportCommit(e consumer.CommitEvent) {
	e.Source, e.Scope = consumer.SourceKafka, c.s.Scope
	observe.Each(c.s.Observers, func(h consumer.CommitHook) { h.OnCommit(e) })
}

// reportPause tells the observers that topic stopped (err says why) or, with a
// nil err, that it resumed.
func (c *Consumer[V, T]) reportPause(topic string, err error) {
	e := consumer.PauseEvent{Source: consumer.SourceKafka, Scope: c.s.Scope, Origin: consumer.Origin{Topic: topic}, Err: err}
	observe.Each(c.s.Observers, func(h consumer.PauseHook) {
		if err != nil {
			h.OnPause(e)
		} else {
			h.OnResume(e)
		}
	})
}

// injectTrace writes the trace context of ctx into a produced copy's headers
// through set, with every consumer.TraceHook of the store (copytrace.Inject); a
// tracer that panics is logged on the consumer's logger and writes nothing.
func (c *Consumer[V, T]) injectTrace(ctx context.Context, set func(key, value string)) {
	copytrace.Inject(ctx, c.log, c.s.Observers, set)
}
