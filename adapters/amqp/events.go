package amqp

import (
	"context"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/observe"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// The worker reports to the observers of its store (consumer.WithObserver):
// every delivery's execution through the engine (HandlerEvent, OutcomeEvent, with
// the queue and the delivery tag as their Origin), and its own events: copies to
// a delayed-retry queue (consumer.RetryHook), confirmed dead-letter copies
// (DeadLetterHook), acknowledgements (AckHook), and lost sessions and their
// return (PauseHook).

// origin is d's origin on the events.
func (w *Worker[V, T]) origin(d amqp091.Delivery) consumer.Origin {
	return consumer.Origin{Queue: w.topo.Queue, DeliveryTag: d.DeliveryTag}
}

// messageContext returns ctx holding d's headers and origin, for the engine's
// events and for tracers.
func (w *Worker[V, T]) messageContext(ctx context.Context, d amqp091.Delivery) context.Context {
	return observe.WithMessage(ctx, &observe.Message{Headers: table(d.Headers), Origin: observe.Origin(w.origin(d))})
}

// observers are the store's observers and its scope.
func (w *Worker[V, T]) observers() ([]consumer.Observer, string) {
	s := w.store.Settings()
	return s.Observers, s.Scope
}

func (w *Worker[V, T]) reportRetry(e consumer.RetryEvent) {
	obs, scope := w.observers()
	e.Source, e.Scope = consumer.SourceAMQP, scope
	observe.Each(obs, func(h consumer.RetryHook) { h.OnRetry(e) })
}

func (w *Worker[V, T]) reportDeadLetter(e consumer.DeadLetterEvent) {
	obs, scope := w.observers()
	e.Source, e.Scope = consumer.SourceAMQP, scope
	observe.Each(obs, func(h consumer.DeadLetterHook) { h.OnDeadLetter(e) })
}

func (w *Worker[V, T]) reportAck(e consumer.AckEvent) {
	obs, scope := w.observers()
	e.Source, e.Scope = consumer.SourceAMQP, scope
	observe.Each(obs, func(h consumer.AckHook) { h.OnAck(e) })
}

// reportPause tells the observers that the worker stopped consuming (err ended
// its session) or, with a nil err, that it consumes again.
func (w *Worker[V, T]) reportPause(err error) {
	obs, scope := w.observers()
	e := consumer.PauseEvent{Source: consumer.SourceAMQP, Scope: scope, Origin: consumer.Origin{Queue: w.topo.Queue}, Err: err}
	observe.Each(obs, func(h consumer.PauseHook) {
		if err != nil {
			h.OnPause(e)
		} else {
			h.OnResume(e)
		}
	})
}
