package amqp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/observe"
	"github.com/idemkit/idemkit/internal/ordering"
	"github.com/idemkit/idemkit/internal/retry"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// flow runs one session's deliveries through the shared execution engine: each
// delivery is submitted as it arrives (ordered: when its lane's turn comes),
// settled as its handler finishes, and acked as soon as it is settled (one
// multiple-ack for a run of settled tags).
type flow[V, T any] struct {
	w      *Worker[V, T]
	ctx    context.Context // the session's work: its deliveries' contexts
	cancel context.CancelFunc
	sub    *amqp091.Channel
	pub    *publisher
	cork   *corkConn // the connection's socket: the acker gathers a burst of acks into one write
	pipe   *consumer.Pipeline[T]
	run    func(context.Context) (T, error)          // runDelivery, the Run of every delivery
	answer func(context.Context, consumer.Result[T]) // doneDelivery, the DoneContext of every delivery
	acks   chan uint64                               // settled delivery tags, for the acker
	done   chan struct{}
	tags   ordering.Tracker
	fail   chan error // an ack or a republish failed: the session ends

	mu      sync.Mutex
	copying int           // republishing goroutines running (each acks its delivery)
	idle    chan struct{} // closed when copying drops to 0
	ended   bool          // stop is done waiting: no more copies start
	acked   bool          // the acker is gone: acks are dropped, the broker redelivers

	lanes laneState[V, T] // ordered only
}

// delivery is one delivery of a session with everything its run, its lane and
// its settlement need, in one allocation. It is also the context it is submitted
// with, which its handler's context derives from: the session's work (flow.ctx),
// answering the delivery itself for the flow's one run and done functions
// (runDelivery, doneDelivery), so that no closure is made per delivery for
// either, and its message for the engine's events and tracers, so that no
// context.WithValue is (see Value).
type delivery[V, T any] struct {
	context.Context // the session's work
	f               *flow[V, T]
	d               amqp091.Delivery
	v               *V // the decoded body, in the same allocation (decoded); nil for NewWorker, whose handler reads d
	key             consumer.Key
	lane            string          // its lane; "" unordered
	msg             observe.Message // its headers and origin, for events and tracers
	hctx            context.Context // its handler's context in its last run (the span its copies carry); nil before one

	// Ordered only: what it went through waiting in its lane.
	tries   int // handler failures retried in place (attempts)
	outages int // waits without a handler run (not attempts)
}

// deliveryKey is the context key a delivery answers itself for.
type deliveryKey struct{}

// messageKey is the context key of the message the engine reports on its events
// and tracers read.
var messageKey = observe.MessageKey()

// Value answers the delivery for deliveryKey, its message for messageKey, and
// asks the session's context for anything else.
func (m *delivery[V, T]) Value(key any) any {
	switch {
	case key == deliveryKey{}:
		return m
	case key == messageKey:
		return &m.msg
	}
	return m.Context.Value(key)
}

// runDelivery is the Run of every delivery: hctx derives from the delivery.
func (f *flow[V, T]) runDelivery(hctx context.Context) (T, error) {
	m, ok := hctx.Value(deliveryKey{}).(*delivery[V, T])
	if !ok {
		var zero T
		return zero, errors.New("amqp: a handler context without its delivery")
	}
	m.hctx = hctx // read once the engine settled this run (Done), or by a later run of its lane
	var v V
	if m.v != nil {
		v = *m.v
	}
	return f.w.handle(hctx, v, m.d)
}

// doneDelivery is the DoneContext of every delivery: ctx is the delivery itself.
func (f *flow[V, T]) doneDelivery(ctx context.Context, r consumer.Result[T]) {
	if m, ok := ctx.(*delivery[V, T]); ok {
		f.settled(m, r)
	}
}

// decoded is a delivery with room for its decoded body, in one allocation.
type decoded[V, T any] struct {
	delivery[V, T]
	val V
}

// item is m for the engine.
func (m *delivery[V, T]) item() consumer.PipelineItem[T] {
	return consumer.PipelineItem[T]{Key: m.key, Payload: m.d.Body, Run: m.f.run, DoneContext: m.f.answer}
}

func (w *Worker[V, T]) newFlow(ctx context.Context, sub *amqp091.Channel, p *publisher, cork *corkConn) (*flow[V, T], error) {
	pipe, err := consumer.NewPipeline[T](ctx, w.store, consumer.WithInFlight(w.cfg.prefetch),
		consumer.WithConcurrency(w.cfg.concurrency), consumer.WithSource("amqp"))
	if err != nil {
		return nil, err
	}
	fctx, cancel := context.WithCancel(ctx)
	f := &flow[V, T]{w: w, ctx: fctx, cancel: cancel, sub: sub, pub: p, cork: cork, pipe: pipe, acks: make(chan uint64, w.cfg.prefetch),
		done: make(chan struct{}), fail: make(chan error, 1)}
	f.run, f.answer = f.runDelivery, f.doneDelivery
	go f.acker()
	if w.lanes != nil {
		f.startLanes()
	}
	return f, nil
}

// stop lets what was taken settle and stops the engine, then waits for the
// dead-letter and retry copies (each confirmed, then its original acked), all
// within the shutdown grace (until work ends). When the grace runs out, a copy not
// yet sent is not sent: its original returns to the queue whole. A copy already
// sent is waited for (its confirm is bounded), and its original acked, so that no
// message is both copied and put back. After a failed session nothing waits: the
// channel is gone and nothing more can be acked. Deliveries still waiting in
// their lanes are not run: they return to the queue with the channel.
func (f *flow[V, T]) stop(ctx, work context.Context) {
	sctx, cancel := context.WithCancel(work)
	defer cancel()
	if ctx.Err() == nil { // the session failed
		cancel()
	}
	_ = f.pipe.Shutdown(sctx)
	f.cancel() // a handler still running was cancelled already; a Submit waiting for room gives up
	if f.w.lanes != nil {
		f.stopLanes()
	}
	if !f.quiet(sctx) {
		f.pub.seal()
	}
	f.mu.Lock()
	f.ended = true
	f.mu.Unlock()
	f.quiet(context.Background()) // the copies already sent
	f.mu.Lock()
	f.acked = true
	close(f.acks)
	f.mu.Unlock()
	<-f.done
	_ = f.sub.Close() // its close-ok comes after the broker took every ack before it
}

// take hands one delivery to the engine, or to its lane.
func (f *flow[V, T]) take(d *amqp091.Delivery) error {
	select {
	case err := <-f.fail:
		return err
	default:
	}
	if err := f.tags.Add(int64(d.DeliveryTag)); err != nil {
		return fmt.Errorf("amqp: delivery tags out of order: %w", err)
	}
	w := f.w
	var m *delivery[V, T]
	if w.skipDecode {
		m = &delivery[V, T]{f: f, d: *d}
	} else {
		dm := &decoded[V, T]{delivery: delivery[V, T]{f: f, d: *d}}
		dm.v = &dm.val
		m = &dm.delivery
	}
	var v V
	var err error
	v, m.key, err = w.prepare(&m.d)
	if m.v != nil {
		*m.v = v
	}
	if err == nil && w.lanes != nil {
		var v any
		if w.cfg.ordering.by == byFunc && m.v != nil {
			v = *m.v
		}
		m.lane, err = w.cfg.ordering.lane(&m.d, v, string(m.key))
	}
	m.msg = observe.Message{Headers: table(m.d.Headers), Origin: observe.Origin{Queue: w.topo.Queue, DeliveryTag: m.d.DeliveryTag}}
	m.Context = f.ctx
	if err != nil {
		kind := "UNDECODABLE"
		if errors.Is(err, ErrNoKey) {
			kind = "NO_KEY"
		}
		f.spawn(func() { f.deadLetter(m, m, attemptsOf(&m.d)+1, kind, consumer.Error, err) })
		return nil
	}
	if m.lane != "" && !w.lanes.Push(m.lane, m) {
		return nil // its lane's turn comes when the deliveries before it are done
	}
	if err := f.pipe.Submit(m, m.item()); err != nil {
		f.release(m)
		return err
	}
	return nil
}

// settled maps a result to its action (consumer.ActionFor). It runs on the
// engine's goroutines: republishing, which waits for a confirm, has its own, and
// so does a wait in place.
func (f *flow[V, T]) settled(m *delivery[V, T], r consumer.Result[T]) {
	w := f.w
	var pe *consumer.PanicError
	if errors.As(r.Err, &pe) {
		w.log.Error("amqp: handler panicked", "queue", w.topo.Queue, "key", string(m.key),
			"panic", fmt.Sprint(pe.Value), "stack", string(pe.Stack))
	}
	if (errors.Is(r.Err, consumer.ErrNotRun) || errors.Is(r.Err, consumer.ErrInterrupted)) &&
		errors.Is(r.Err, consumer.ErrPipelineStopped) {
		f.release(m) // shutting down: its claim was released; the broker redelivers it, and its lane's later ones
		return
	}
	switch r.Action() {
	case consumer.Ack:
		f.ack(m.d.DeliveryTag)
		f.release(m)
		return
	case consumer.DeadLetter:
		attempts := attemptsOf(&m.d) + m.tries + 1
		f.spawn(func() { f.deadLetter(m, m, attempts, consumer.DeadLetterKind(r.Err), r.Outcome, r.Err) })
		f.release(m) // its handler never runs again: the lane goes on
		return
	}
	if m.lane != "" {
		f.again(m, r)
		return
	}
	// Retry later through a delayed-retry queue. Another owner's live claim, a
	// store outage or a handler that never ran is not an attempt: the delivery
	// cycles through the longest delay (or the shortest not under the lease left)
	// with its attempts unchanged. A handler failure is one.
	attempts := attemptsOf(&m.d)
	counted := r.Outcome != consumer.InProgress && !consumer.NotAnAttempt(r.Err)
	delays := w.topo.RetryDelays
	delay := delays[len(delays)-1]
	switch {
	case r.Outcome == consumer.InProgress:
		delay = w.topo.retryDelay(len(delays), r.LeaseLeft)
	case counted:
		attempts++
		if attempts >= w.maxAttempts {
			f.exhausted(m, attempts, r)
			return
		}
		delay = w.topo.retryDelay(attempts, 0)
	}
	f.spawn(func() { f.retry(m, m, attempts, delay, r) })
}

// again runs an ordered delivery again in place, after a pause, holding back its
// lane: a copy through a delayed-retry queue would let the later deliveries of its
// key run before it. Another owner's live claim is looked at again when it may
// have ended; a store outage or a handler that never ran waits with the
// reconnection backoff; neither is an attempt. A handler failure is one, and
// waits the retry delay its delayed-retry queue would have; at WithMaxAttempts
// the delivery is dead-lettered (EXHAUSTED) and its lane goes on.
func (f *flow[V, T]) again(m *delivery[V, T], r consumer.Result[T]) {
	w := f.w
	switch {
	case r.Outcome == consumer.InProgress:
		f.later(m, max(min(r.LeaseLeft+10*time.Millisecond, 250*time.Millisecond), 5*time.Millisecond))
	case consumer.NotAnAttempt(r.Err):
		m.outages++
		f.later(m, retry.Backoff(w.cfg.backoffBase, w.cfg.backoffMax, m.outages))
	default:
		m.tries++
		attempts := attemptsOf(&m.d) + m.tries
		if attempts >= w.maxAttempts {
			f.exhausted(m, attempts, r)
			f.release(m)
			return
		}
		delay := w.topo.retryDelay(attempts, 0)
		w.reportRetry(consumer.RetryEvent{Key: m.key, Origin: consumer.Origin(m.msg.Origin), Attempt: attempts, Delay: delay,
			Kind: consumer.ErrorKind(r.Err), Err: r.Err})
		f.later(m, delay)
	}
}

// exhausted dead-letters m, still failing after attempts deliveries.
func (f *flow[V, T]) exhausted(m *delivery[V, T], attempts int, r consumer.Result[T]) {
	why := fmt.Errorf("still failing after %d deliveries: %w", attempts, r.Err)
	f.spawn(func() {
		f.deadLetter(m, m, attempts, consumer.DeadLetterKind(consumer.ErrAttemptsExhausted), r.Outcome, why)
	})
}
