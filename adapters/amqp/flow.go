package amqp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/ordering"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// flow runs one session's deliveries through the shared execution engine: each
// delivery is submitted as it arrives, settled as its handler finishes, and acked
// as soon as it is settled (one multiple-ack for a run of settled tags).
type flow[V, T any] struct {
	w    *Worker[V, T]
	sub  *amqp091.Channel
	pub  *publisher
	pipe *consumer.Pipeline[T]
	acks chan uint64 // settled delivery tags, for the acker
	done chan struct{}
	tags ordering.Tracker
	fail chan error // an ack or a republish failed: the session ends

	mu      sync.Mutex
	copying int           // republishing goroutines running (each acks its delivery)
	idle    chan struct{} // closed when copying drops to 0
	ended   bool          // stop is done waiting: no more copies start
	acked   bool          // the acker is gone: acks are dropped, the broker redelivers
}

func (w *Worker[V, T]) newFlow(ctx context.Context, sub *amqp091.Channel, p *publisher) (*flow[V, T], error) {
	pipe, err := consumer.NewPipeline[T](ctx, w.store, consumer.WithInFlight(w.cfg.prefetch),
		consumer.WithConcurrency(w.cfg.concurrency), consumer.WithSource("amqp"))
	if err != nil {
		return nil, err
	}
	f := &flow[V, T]{w: w, sub: sub, pub: p, pipe: pipe, acks: make(chan uint64, w.cfg.prefetch),
		done: make(chan struct{}), fail: make(chan error, 1)}
	go f.acker()
	return f, nil
}

// stop lets what was taken settle and stops the engine, then waits for the
// dead-letter and retry copies (each confirmed, then its original acked), all
// within the shutdown grace (until work ends). When the grace runs out, a copy not
// yet sent is not sent: its original returns to the queue whole. A copy already
// sent is waited for (its confirm is bounded), and its original acked, so that no
// message is both copied and put back. After a failed session nothing waits: the
// channel is gone and nothing more can be acked.
func (f *flow[V, T]) stop(ctx, work context.Context) {
	sctx, cancel := context.WithCancel(work)
	defer cancel()
	if ctx.Err() == nil { // the session failed
		cancel()
	}
	_ = f.pipe.Shutdown(sctx)
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

// take hands one delivery to the engine.
func (f *flow[V, T]) take(ctx context.Context, d amqp091.Delivery) error {
	select {
	case err := <-f.fail:
		return err
	default:
	}
	if err := f.tags.Add(int64(d.DeliveryTag)); err != nil {
		return fmt.Errorf("amqp: delivery tags out of order: %w", err)
	}
	v, key, err := f.w.prepare(d)
	if err != nil {
		kind := "UNDECODABLE"
		if errors.Is(err, ErrNoKey) {
			kind = "NO_KEY"
		}
		f.spawn(func() { f.deadLetter(ctx, d, key, attemptsOf(d)+1, kind, consumer.Error, err) })
		return nil
	}
	item := consumer.PipelineItem[T]{Key: key, Payload: d.Body,
		Run:  func(hctx context.Context) (T, error) { return f.w.handle(hctx, v, d) },
		Done: func(r consumer.Result[T]) { f.settled(ctx, d, key, r) },
	}
	return f.pipe.Submit(f.w.messageContext(ctx, d), item)
}

// settled maps a result to its action (consumer.ActionFor). It runs on the
// engine's goroutines: republishing, which waits for a confirm, has its own.
func (f *flow[V, T]) settled(ctx context.Context, d amqp091.Delivery, key consumer.Key, r consumer.Result[T]) {
	w := f.w
	var pe *consumer.PanicError
	if errors.As(r.Err, &pe) {
		w.log.Error("amqp: handler panicked", "queue", w.topo.Queue, "key", string(key),
			"panic", fmt.Sprint(pe.Value), "stack", string(pe.Stack))
	}
	if (errors.Is(r.Err, consumer.ErrNotRun) || errors.Is(r.Err, consumer.ErrInterrupted)) &&
		errors.Is(r.Err, consumer.ErrPipelineStopped) {
		return // shutting down: its claim was released; the broker redelivers it
	}
	attempts := attemptsOf(d)
	switch r.Action() {
	case consumer.Ack:
		f.ack(d)
		return
	case consumer.DeadLetter:
		f.spawn(func() { f.deadLetter(ctx, d, key, attempts+1, consumer.DeadLetterKind(r.Err), r.Outcome, r.Err) })
		return
	}
	// Retry later through a delayed-retry queue. Another owner's live claim, a
	// store outage or a handler that never ran is not an attempt: the delivery
	// cycles through the longest delay (or the shortest not under the lease left)
	// with its attempts unchanged. A handler failure is one.
	counted := r.Outcome != consumer.InProgress && !consumer.NotAnAttempt(r.Err)
	delays := w.topo.RetryDelays
	delay := delays[len(delays)-1]
	switch {
	case r.Outcome == consumer.InProgress:
		delay = w.topo.retryDelay(len(delays), r.LeaseLeft)
	case counted:
		attempts++
		if attempts >= w.maxAttempts {
			why := fmt.Errorf("still failing after %d deliveries: %w", attempts, r.Err)
			f.spawn(func() {
				f.deadLetter(ctx, d, key, attempts, consumer.DeadLetterKind(consumer.ErrAttemptsExhausted), r.Outcome, why)
			})
			return
		}
		delay = w.topo.retryDelay(attempts, 0)
	}
	f.spawn(func() { f.retry(ctx, d, key, attempts, delay, r) })
}

// retry publishes d's copy to the delayed-retry queue of delay, confirmed, then
// acks d.
func (f *flow[V, T]) retry(ctx context.Context, d amqp091.Delivery, key consumer.Key, attempts int, delay time.Duration,
	r consumer.Result[T]) {
	w := f.w
	queue := w.topo.RetryQueue(delay)
	extra := amqp091.Table{HeaderAttempts: int32(attempts)}
	if _, ok := d.Headers[HeaderOriginalRouting]; !ok {
		extra[HeaderOriginalExch], extra[HeaderOriginalRouting] = d.Exchange, d.RoutingKey
	}
	if _, err := f.pub.publish(ctx, queue, d, extra, false); err != nil {
		f.failed(err)
		return
	}
	w.reportRetry(consumer.RetryEvent{Key: key, Origin: w.origin(d), Attempt: attempts, Delay: delay, Destination: queue,
		Kind: consumer.ErrorKind(r.Err), Err: r.Err})
	f.ack(d)
}

// deadLetter publishes d's copy to the dead-letter queue, confirmed, then acks d.
func (f *flow[V, T]) deadLetter(ctx context.Context, d amqp091.Delivery, key consumer.Key, attempts int, kind string,
	o consumer.Outcome, reason error) {
	w := f.w
	text := "unknown"
	if reason != nil {
		text = consumer.CapText(reason.Error(), MaxErrorHeader)
	}
	extra := amqp091.Table{
		HeaderAttempts: int32(attempts), HeaderReason: text, HeaderOutcome: o.String(), HeaderKind: kind,
		HeaderKey: string(key), HeaderOriginalQueue: w.topo.Queue,
	}
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
	f.ack(d)
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

// ack hands a settled delivery's tag to the acker; once the acker is gone, the
// delivery returns to the queue with the channel.
func (f *flow[V, T]) ack(d amqp091.Delivery) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.acked {
		f.acks <- d.DeliveryTag // the acker never takes mu: it drains
	}
}

// acker acks settled tags: whatever is waiting is taken at once; the tags that
// extend the contiguous settled prefix are acked with one multiple-ack of the
// highest of them (every tag below it is settled), the others one by one.
func (f *flow[V, T]) acker() {
	defer close(f.done)
	for tag := range f.acks {
		batch := []uint64{tag}
		for more := true; more; {
			select {
			case t, ok := <-f.acks:
				if !ok {
					more = false
					break
				}
				batch = append(batch, t)
			default:
				more = false
			}
		}
		var through int64
		for _, t := range batch {
			through, _ = f.tags.Settle(int64(t))
		}
		var top uint64
		var err error
		for _, t := range batch {
			switch {
			case int64(t) <= through:
				top = max(top, t)
			case err == nil:
				err = f.sub.Ack(t, false)
			}
		}
		if top > 0 && err == nil {
			err = f.sub.Ack(top, true)
		}
		if err != nil {
			f.failed(fmt.Errorf("amqp: ack: %w", err))
			continue
		}
		f.w.reportAck(consumer.AckEvent{Origin: consumer.Origin{Queue: f.w.topo.Queue, DeliveryTag: slices.Max(batch)},
			Messages: len(batch)})
	}
}

// table reads AMQP headers as a consumer.Carrier (string values only).
type table amqp091.Table

func (t table) Get(key string) string {
	s, _ := t[key].(string)
	return s
}

func (t table) Keys() []string {
	out := make([]string, 0, len(t))
	for k := range t {
		out = append(out, k)
	}
	return out
}
