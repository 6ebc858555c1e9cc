package amqp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/retry"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Errors that send a delivery to the dead-letter queue before it reaches the handler.
var (
	// ErrUndecodable: the decode function refused the body.
	ErrUndecodable = errors.New("amqp: undecodable body")
	// ErrNoKey: the delivery has no usable idempotency key.
	ErrNoKey = errors.New("amqp: no usable idempotency key")
)

// Worker consumes one queue through the idempotent handler. Create it with
// NewWorker or NewTypedWorker, run it with Run.
type Worker[V, T any] struct {
	url         string
	store       consumer.Store
	topo        Topology
	decode      func(amqp091.Delivery) (V, error)
	handle      func(ctx context.Context, v V, d amqp091.Delivery) (T, error)
	cfg         config
	log         *slog.Logger
	maxAttempts int
	running     atomic.Bool
}

// NewWorker returns a worker that runs handler on every delivery of topo.Queue on
// the broker at url (amqp://user:pass@host:port/vhost).
func NewWorker[T any](store consumer.Store, url string, topo Topology,
	handler func(ctx context.Context, d amqp091.Delivery) (T, error), opts ...Opt) (*Worker[amqp091.Delivery, T], error) {
	if handler == nil {
		return nil, configError("nil handler")
	}
	return NewTypedWorker(store, url, topo,
		func(d amqp091.Delivery) (amqp091.Delivery, error) { return d, nil },
		func(ctx context.Context, d amqp091.Delivery, _ amqp091.Delivery) (T, error) { return handler(ctx, d) },
		opts...)
}

// NewTypedWorker is NewWorker with a decode step: a body that decode refuses goes
// to the dead-letter queue with the reason and never reaches handler.
func NewTypedWorker[V, T any](store consumer.Store, url string, topo Topology, decode func(amqp091.Delivery) (V, error),
	handler func(ctx context.Context, v V, d amqp091.Delivery) (T, error), opts ...Opt) (*Worker[V, T], error) {
	cfg := defaults()
	for _, o := range opts {
		if o == nil {
			return nil, configError("nil option")
		}
		o.apply(&cfg)
	}
	switch {
	case store == nil:
		return nil, configError("nil store: pass consumer.NewRedisStore(...)")
	case url == "":
		return nil, configError("empty broker URL: give amqp://user:pass@host:5672/")
	case decode == nil:
		return nil, configError("nil decode function")
	case handler == nil:
		return nil, configError("nil handler")
	case cfg.valueType != nil && cfg.valueType != reflect.TypeFor[V]():
		return nil, configError("WithValueKey takes a %v but the worker decodes %v", cfg.valueType, reflect.TypeFor[V]())
	}
	if _, err := amqp091.ParseURI(url); err != nil {
		return nil, configError("broker URL: %v", err)
	}
	if err := topo.validate(); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := store.Settings()
	w := &Worker[V, T]{url: url, store: store, topo: topo.withDefaults(), decode: decode, handle: handler, cfg: cfg,
		log: cfg.logger, maxAttempts: cfg.maxAttempts}
	if w.log == nil {
		w.log = s.Logger
	}
	if w.maxAttempts == 0 {
		w.maxAttempts = s.MaxAttempts
	}
	return w, nil
}

// Run consumes until ctx is cancelled, reconnecting whenever the connection or a
// channel is lost. It returns nil after a cancellation, or the error that makes
// going on pointless (a *TopologyConflictError). Run may be called once.
func (w *Worker[V, T]) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("amqp: Run called twice")
	}
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	stopGrace := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(w.cfg.shutdownGrace, cancelWork)
		context.AfterFunc(work, func() { t.Stop() })
	})
	defer stopGrace()

	failures := 0
	for {
		began := time.Now()
		err := w.session(ctx, work)
		if ctx.Err() != nil {
			return nil
		}
		var conflict *TopologyConflictError
		if errors.As(err, &conflict) {
			return err
		}
		if time.Since(began) > time.Minute {
			failures = 0
		}
		failures++
		pause := retry.Backoff(w.cfg.backoffBase, w.cfg.backoffMax, failures)
		w.log.Warn("amqp: session lost; reconnecting", "err", err, "in", pause)
		w.each(func(h Hook) {
			if h, ok := h.(ReconnectHook); ok {
				h.OnReconnect(err)
			}
		})
		if !retry.Sleep(ctx, pause) {
			return nil
		}
	}
}

// session runs one connection until it fails or ctx is cancelled.
func (w *Worker[V, T]) session(ctx, work context.Context) error {
	conn, err := amqp091.DialConfig(w.url, amqp091.Config{
		Properties: amqp091.Table{"connection_name": w.cfg.name},
		Heartbeat:  10 * time.Second,
		Dial:       amqp091.DefaultDial(5 * time.Second),
	})
	if err != nil {
		return fmt.Errorf("amqp: dial: %w", err)
	}
	defer conn.Close()
	if w.cfg.declare {
		if err := w.topo.Declare(conn); err != nil {
			return err
		}
	}
	pub, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := pub.Confirm(false); err != nil {
		return fmt.Errorf("amqp: publisher confirms: %w", err)
	}
	returns := pub.NotifyReturn(make(chan amqp091.Return, 1))
	sub, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := sub.Qos(w.cfg.prefetch, 0, false); err != nil {
		return err
	}
	closed := conn.NotifyClose(make(chan *amqp091.Error, 1))
	deliveries, err := sub.ConsumeWithContext(ctx, w.topo.Queue, w.cfg.name+"-"+token(), false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("amqp: consume %q: %w", w.topo.Queue, err)
	}
	p := &publisher{ch: pub, returns: returns}
	for {
		d, ok := <-deliveries
		if !ok {
			if ctx.Err() != nil {
				return nil
			}
			select {
			case cerr := <-closed:
				return fmt.Errorf("amqp: connection closed: %v", cerr)
			default:
				return errors.New("amqp: consumer channel closed")
			}
		}
		batch := w.collect(d, deliveries)
		if err := w.process(work, p, batch); err != nil {
			return err
		}
	}
}

// collect gathers a batch after its first delivery: whatever follows within the
// linger, up to the prefetch count. Deliveries reach the client one frame at a
// time, so waiting a moment turns many one-message batches into one.
func (w *Worker[V, T]) collect(first amqp091.Delivery, deliveries <-chan amqp091.Delivery) []amqp091.Delivery {
	batch := []amqp091.Delivery{first}
	if w.cfg.linger <= 0 {
		return batch
	}
	t := time.NewTimer(w.cfg.linger)
	defer t.Stop()
	for len(batch) < w.cfg.prefetch {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return batch
			}
			batch = append(batch, d)
		case <-t.C:
			return batch
		}
	}
	return batch
}

// prepare decodes d and finds its key.
func (w *Worker[V, T]) prepare(d amqp091.Delivery) (V, consumer.Key, error) {
	v, err := w.decode(d)
	if err != nil {
		return v, consumer.Key(d.MessageId), fmt.Errorf("%w: %v", ErrUndecodable, err)
	}
	var key consumer.Key
	switch {
	case w.cfg.keyFunc != nil:
		key, err = w.cfg.keyFunc(d, v)
	case w.cfg.keyHeader != "":
		s, _ := d.Headers[w.cfg.keyHeader].(string)
		key = consumer.Key(s)
	default:
		key = consumer.Key(d.MessageId)
	}
	if err == nil {
		err = key.Validate()
	}
	if err != nil {
		return v, key, fmt.Errorf("%w: %v", ErrNoKey, err)
	}
	return v, key, nil
}

// process runs one batch and settles every delivery of it: republishes first (each
// confirmed), then the acks, as one multiple-ack when every delivery of the batch
// is acked. An error ends the session (a republish or an ack failed); unsettled
// deliveries return to the queue.
func (w *Worker[V, T]) process(ctx context.Context, p *publisher, batch []amqp091.Delivery) error {
	requeue := make([]bool, len(batch))
	if err := w.run(ctx, p, batch, requeue); err != nil {
		return err
	}
	if !slices.Contains(requeue, true) {
		return batch[len(batch)-1].Ack(true) // tags of one channel rise: this acks the whole batch
	}
	for i, d := range batch {
		var err error
		if requeue[i] {
			err = d.Nack(false, true)
		} else {
			err = d.Ack(false)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// run executes a batch and republishes what must be retried or dead-lettered;
// requeue marks the deliveries to give back to the queue.
func (w *Worker[V, T]) run(ctx context.Context, p *publisher, batch []amqp091.Delivery, requeue []bool) error {
	items := make([]consumer.BatchItem, 0, len(batch))
	vals := make([]V, 0, len(batch))
	idx := make([]int, 0, len(batch))
	for i, d := range batch {
		v, key, err := w.prepare(d)
		if err != nil {
			outcome := "UNDECODABLE"
			if errors.Is(err, ErrNoKey) {
				outcome = "NO_KEY"
			}
			if err := w.deadLetter(ctx, p, d, key, attemptsOf(d)+1, outcome, err.Error()); err != nil {
				return err
			}
			continue
		}
		items = append(items, consumer.BatchItem{Key: key, Payload: d.Body})
		vals = append(vals, v)
		idx = append(idx, i)
	}
	if len(items) == 0 {
		return nil
	}
	res := consumer.ExecuteBatch(ctx, w.store, items,
		func(hctx context.Context, k int, _ consumer.BatchItem) (T, error) {
			return w.handle(hctx, vals[k], batch[idx[k]])
		},
		consumer.WithConcurrency(min(w.cfg.concurrency, len(items))), consumer.WithPerMessageCompletion(w.cfg.perMessage))
	for k, r := range res {
		back, err := w.settle(ctx, p, batch[idx[k]], items[k].Key, r)
		if err != nil {
			return err
		}
		requeue[idx[k]] = back
	}
	return nil
}

// settle decides one delivery, as consumer.ActionFor says: to be acked (after its
// retry or dead-letter copy is confirmed), or given back to the queue (requeue).
func (w *Worker[V, T]) settle(ctx context.Context, p *publisher, d amqp091.Delivery, key consumer.Key, r consumer.Result[T]) (requeue bool, err error) {
	attempts := attemptsOf(d) + 1 // this delivery was attempt n
	switch r.Action() {
	case consumer.Settle:
		w.outcome(d, r.Outcome)
		return false, nil
	case consumer.DeadLetter:
		return false, w.deadLetter(ctx, p, d, key, attempts, r.Outcome.String(), errText(r.Err))
	}
	if errors.Is(r.Err, consumer.ErrNotRun) { // shutting down: its claim was released
		return true, nil
	}
	if attempts >= w.maxAttempts {
		return false, w.deadLetter(ctx, p, d, key, attempts, r.Outcome.String(),
			fmt.Sprintf("still not done after %d deliveries: %s", attempts, errText(r.Err)))
	}
	var wait time.Duration
	if r.Outcome == consumer.InProgress {
		wait = r.LeaseLeft
	}
	queue := w.topo.RetryQueue(w.topo.retryDelay(attempts, wait))
	extra := amqp091.Table{HeaderAttempts: int32(attempts)}
	if _, ok := d.Headers[HeaderOriginalRouting]; !ok {
		extra[HeaderOriginalExch], extra[HeaderOriginalRouting] = d.Exchange, d.RoutingKey
	}
	if err := p.publish(ctx, queue, d, extra); err != nil {
		return false, err
	}
	w.each(func(h Hook) {
		if h, ok := h.(RetryHook); ok {
			h.OnRetry(d, attempts, queue, r.Err)
		}
	})
	w.outcome(d, r.Outcome)
	return false, nil
}

func (w *Worker[V, T]) deadLetter(ctx context.Context, p *publisher, d amqp091.Delivery, key consumer.Key,
	attempts int, outcome, reason string) error {
	extra := amqp091.Table{
		HeaderAttempts: int32(attempts), HeaderReason: reason, HeaderOutcome: outcome, HeaderKey: string(key),
		HeaderOriginalQueue: w.topo.Queue,
	}
	if _, ok := d.Headers[HeaderOriginalRouting]; !ok {
		extra[HeaderOriginalExch], extra[HeaderOriginalRouting] = d.Exchange, d.RoutingKey
	}
	if err := p.publish(ctx, w.topo.DeadLetterQueue, d, extra); err != nil {
		return err
	}
	w.log.Warn("amqp: delivery dead-lettered", "queue", w.topo.Queue, "key", string(key), "outcome", outcome, "reason", reason)
	w.each(func(h Hook) {
		if h, ok := h.(DeadLetterHook); ok {
			h.OnDeadLetter(d, reason)
		}
	})
	return nil
}

func (w *Worker[V, T]) outcome(d amqp091.Delivery, o consumer.Outcome) {
	w.each(func(h Hook) {
		if h, ok := h.(OutcomeHook); ok {
			h.OnOutcome(d, o)
		}
	})
}

// publisher republishes on a channel in confirm mode, one message at a time.
type publisher struct {
	ch      *amqp091.Channel
	returns chan amqp091.Return
}

// publish copies d to queue (through the default exchange) with extra headers and
// waits for the broker's confirm; an unroutable message is an error.
func (p *publisher) publish(ctx context.Context, queue string, d amqp091.Delivery, extra amqp091.Table) error {
	headers := amqp091.Table{}
	for k, v := range d.Headers {
		headers[k] = v
	}
	for k, v := range extra {
		headers[k] = v
	}
	conf, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp091.Publishing{
		Headers: headers, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
		DeliveryMode: amqp091.Persistent, Priority: d.Priority, CorrelationId: d.CorrelationId, ReplyTo: d.ReplyTo,
		MessageId: d.MessageId, Timestamp: d.Timestamp, Type: d.Type, AppId: d.AppId, Body: d.Body,
	})
	if err != nil {
		return fmt.Errorf("amqp: republish to %q: %w", queue, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	acked, err := conf.WaitContext(wctx)
	switch {
	case err != nil:
		return fmt.Errorf("amqp: republish to %q: no confirm: %w", queue, err)
	case !acked:
		return fmt.Errorf("amqp: republish to %q: the broker refused it (nack)", queue)
	}
	select {
	case ret := <-p.returns:
		return fmt.Errorf("amqp: republish to %q: unroutable (%s): declare the topology", queue, ret.ReplyText)
	default:
		return nil
	}
}

// attemptsOf reads the adapter's attempt header (0 when absent).
func attemptsOf(d amqp091.Delivery) int {
	switch v := d.Headers[HeaderAttempts].(type) {
	case int8:
		return int(v)
	case int16:
		return int(v)
	case int32:
		return int(v)
	case int64:
		return int(v)
	case int:
		return v
	}
	return 0
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func token() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
