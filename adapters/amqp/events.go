package amqp

import (
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

// hooks says which of the worker's own events some observer takes, so that no
// event is built for nobody.
// trace: some observer is a tracer (consumer.TraceHook), which writes the trace
// context of the retry and dead-letter copies.
type hooks struct{ retry, deadLetter, ack, pause, trace bool }

func hooksOf(obs []consumer.Observer) hooks {
	var h hooks
	for _, o := range obs {
		_, r := o.(consumer.RetryHook)
		_, d := o.(consumer.DeadLetterHook)
		_, a := o.(consumer.AckHook)
		_, p := o.(consumer.PauseHook)
		_, t := o.(consumer.TraceHook)
		h.retry, h.deadLetter, h.ack, h.pause = h.retry || r, h.deadLetter || d, h.ack || a, h.pause || p
		h.trace = h.trace || t
	}
	return h
}

// origin is d's origin on the events.
func (w *Worker[V, T]) origin(d *amqp091.Delivery) consumer.Origin {
	return consumer.Origin{Queue: w.topo.Queue, DeliveryTag: d.DeliveryTag}
}

func (w *Worker[V, T]) reportRetry(e consumer.RetryEvent) {
	if !w.hooks.retry {
		return
	}
	e.Source, e.Scope = consumer.SourceAMQP, w.scope
	observe.Each(w.obs, func(h consumer.RetryHook) { h.OnRetry(e) })
}

func (w *Worker[V, T]) reportDeadLetter(e consumer.DeadLetterEvent) {
	if !w.hooks.deadLetter {
		return
	}
	e.Source, e.Scope = consumer.SourceAMQP, w.scope
	observe.Each(w.obs, func(h consumer.DeadLetterHook) { h.OnDeadLetter(e) })
}

func (w *Worker[V, T]) reportAck(e consumer.AckEvent) {
	e.Source, e.Scope = consumer.SourceAMQP, w.scope
	observe.Each(w.obs, func(h consumer.AckHook) { h.OnAck(e) })
}

// reportPause tells the observers that the worker stopped consuming (err ended
// its session) or, with a nil err, that it consumes again.
func (w *Worker[V, T]) reportPause(err error) {
	if !w.hooks.pause {
		return
	}
	e := consumer.PauseEvent{Source: consumer.SourceAMQP, Scope: w.scope, Origin: consumer.Origin{Queue: w.topo.Queue}, Err: err}
	observe.Each(w.obs, func(h consumer.PauseHook) {
		if err != nil {
			h.OnPause(e)
		} else {
			h.OnResume(e)
		}
	})
}
