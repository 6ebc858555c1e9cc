package amqp

import (
	"github.com/idemkit/idemkit/consumer"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Hook observes a worker, for metrics. A hook implements any of the interfaces
// below. Hooks are called synchronously: keep them fast.
type Hook any

// OutcomeHook is told the outcome of every delivery.
type OutcomeHook interface {
	OnOutcome(d amqp091.Delivery, outcome consumer.Outcome)
}

// RetryHook is told of every delivery sent to a delayed-retry queue.
type RetryHook interface {
	OnRetry(d amqp091.Delivery, attempt int, queue string, err error)
}

// DeadLetterHook is told of every delivery sent to the dead-letter queue.
type DeadLetterHook interface {
	OnDeadLetter(d amqp091.Delivery, reason string)
}

// ReconnectHook is told of every lost session, before the worker reconnects.
type ReconnectHook interface {
	OnReconnect(err error)
}

func (w *Worker[V, T]) each(fn func(Hook)) {
	for _, h := range w.cfg.hooks {
		fn(h)
	}
}
