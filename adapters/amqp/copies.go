package amqp

import (
	"context"
	"errors"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/copytrace"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// spawn runs a republish on a goroutine the flow owns, unless stop is done
// waiting for them (the delivery then returns to the queue with the channel).
func (f *flow[V, T]) spawn(republish func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ended {
		return
	}
	if f.copying == 0 {
		f.idle = make(chan struct{})
	}
	f.copying++
	go func() {
		defer f.spawned()
		republish()
	}()
}

func (f *flow[V, T]) spawned() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.copying--; f.copying == 0 {
		close(f.idle)
	}
}

// quiet waits until no republish runs, or ctx ends; it reports whether none runs.
func (f *flow[V, T]) quiet(ctx context.Context) bool {
	for {
		f.mu.Lock()
		n, idle := f.copying, f.idle
		f.mu.Unlock()
		if n == 0 {
			return true
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return false
		}
	}
}

// retry publishes m's copy to the delayed-retry queue of delay, confirmed, then
// acks m.
func (f *flow[V, T]) retry(ctx context.Context, m *delivery[V, T], attempts int, delay time.Duration, r consumer.Result[T]) {
	w, d := f.w, &m.d
	queue := w.topo.RetryQueue(delay)
	extra := w.traced(m)
	extra[HeaderAttempts] = int32(attempts)
	if _, ok := d.Headers[HeaderOriginalRouting]; !ok {
		extra[HeaderOriginalExch], extra[HeaderOriginalRouting] = d.Exchange, d.RoutingKey
	}
	if _, err := f.pub.publish(ctx, queue, d, extra, false); err != nil {
		f.failed(err)
		return
	}
	w.reportRetry(consumer.RetryEvent{Key: m.key, Origin: w.origin(d), Attempt: attempts, Delay: delay, Destination: queue,
		Kind: consumer.ErrorKind(r.Err), Err: r.Err})
	f.ack(d.DeliveryTag)
}

// deadLetter publishes m's copy to the dead-letter queue, confirmed, then acks m.
func (f *flow[V, T]) deadLetter(ctx context.Context, m *delivery[V, T], attempts int, kind string,
	o consumer.Outcome, reason error) {
	w, d, key := f.w, &m.d, m.key
	text := "unknown"
	if reason != nil {
		text = consumer.CapText(reason.Error(), MaxErrorHeader)
	}
	extra := w.traced(m)
	extra[HeaderAttempts], extra[HeaderReason], extra[HeaderOutcome], extra[HeaderKind] = int32(attempts), text, o.String(), kind
	extra[HeaderKey], extra[HeaderOriginalQueue] = string(key), w.topo.Queue
	if _, ok := d.Headers[HeaderOriginalRouting]; !ok {
		extra[HeaderOriginalExch], extra[HeaderOriginalRouting] = d.Exchange, d.RoutingKey
	}
	bodyLess, err := f.pub.publish(ctx, w.topo.DeadLetterQueue, d, extra, true)
	if err != nil {
		f.failed(err)
		return
	}
	w.log.Warn("amqp: delivery dead-lettered", "queue", w.topo.Queue, "key", string(key), "kind", kind,
		"body_less", bodyLess, "reason", consumer.CapText(text, 256))
	w.reportDeadLetter(consumer.DeadLetterEvent{Key: key, Origin: w.origin(d), Kind: kind, Err: reason,
		Destination: w.topo.DeadLetterQueue, BodyLess: bodyLess})
	f.ack(d.DeliveryTag)
}

// traced returns the headers a copy of m starts from: the trace context the
// store's tracers write (copytrace.Inject) for its handler's last run, so the copy
// carries that execution's span, or, when no handler ran (an undecodable delivery,
// one without a key, a key in progress elsewhere, a store outage), for the
// delivery itself, so the copy carries the delivered message's own trace context.
// They replace the message's headers of the same names in the copy, and the
// idemkit headers are set over them.
func (w *Worker[V, T]) traced(m *delivery[V, T]) amqp091.Table {
	extra := amqp091.Table{}
	if !w.hooks.trace {
		return extra
	}
	ctx := m.hctx
	if ctx == nil {
		ctx = m
	}
	copytrace.Inject(ctx, w.log, w.obs, func(k, v string) { extra[k] = v })
	return extra
}

// failed ends the session over err, unless err is the end of the shutdown grace:
// then the delivery just returns to the queue with the channel.
func (f *flow[V, T]) failed(err error) {
	if errors.Is(err, errSealed) {
		return
	}
	select {
	case f.fail <- err:
	default:
	}
	_ = f.sub.Close() // the session ends; what was not acked returns to the queue
}
