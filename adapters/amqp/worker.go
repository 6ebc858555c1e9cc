package amqp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/ordering"
	"github.com/idemkit/idemkit/internal/retry"
	"github.com/idemkit/idemkit/internal/typednil"
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
	user, vhost string // from the URL, to name in errors
	running     atomic.Bool
	ready       atomic.Pointer[error]                // what Ready reports; nil pointer: consuming
	lost        bool                                 // a session was lost and none consumes since (Run's goroutine only)
	obs         []consumer.Observer                  // the store's observers
	scope       string                               // the store's scope
	hooks       hooks                                // which of the worker's events the observers take
	lanes       *ordering.Sequencer[*delivery[V, T]] // ordered: the deliveries of each lane, across sessions
	skipDecode  bool                                 // NewWorker: the handler reads the delivery, V is never used
}

// NewWorker returns a worker that runs handler on every delivery of topo.Queue on
// the broker at url (amqp://user:pass@host:port/vhost).
func NewWorker[T any](store consumer.Store, url string, topo Topology,
	handler func(ctx context.Context, d amqp091.Delivery) (T, error), opts ...Option) (*Worker[amqp091.Delivery, T], error) {
	if handler == nil {
		return nil, configError("nil handler")
	}
	w, err := NewTypedWorker(store, url, topo,
		func(d amqp091.Delivery) (amqp091.Delivery, error) { return d, nil },
		func(ctx context.Context, _ amqp091.Delivery, d amqp091.Delivery) (T, error) { return handler(ctx, d) },
		opts...)
	if err != nil {
		return nil, err
	}
	// The handler takes the delivery itself: no decoded copy is kept, unless a
	// key or an ordering of the decoded value reads one.
	w.skipDecode = w.cfg.valueType == nil && w.cfg.ordering.vtype == nil
	return w, nil
}

// NewTypedWorker is NewWorker with a decode step: a body that decode refuses goes
// to the dead-letter queue with the reason and never reaches handler.
func NewTypedWorker[V, T any](store consumer.Store, url string, topo Topology, decode func(amqp091.Delivery) (V, error),
	handler func(ctx context.Context, v V, d amqp091.Delivery) (T, error), opts ...Option) (*Worker[V, T], error) {
	cfg := defaults()
	for _, o := range opts {
		if o == nil {
			return nil, configError("nil option")
		}
		o.apply(&cfg)
	}
	switch {
	case store == nil || typednil.Is(store):
		return nil, configError("nil store: pass a store from idemkit/store/redis, store/postgres, store/dynamodb or store/memory")
	case url == "":
		return nil, configError("empty broker URL: give amqp://user:pass@host:5672/")
	case decode == nil:
		return nil, configError("nil decode function")
	case handler == nil:
		return nil, configError("nil handler")
	case cfg.valueType != nil && cfg.valueType != reflect.TypeFor[V]():
		return nil, configError("WithValueKey takes a %v but the worker decodes %v", cfg.valueType, reflect.TypeFor[V]())
	}
	if err := cfg.ordering.validate(reflect.TypeFor[V]()); err != nil {
		return nil, err
	}
	uri, err := amqp091.ParseURI(url)
	if err != nil {
		return nil, configError("broker URL: %v", err)
	}
	if err := topo.validate(); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.concurrency == 0 {
		cfg.concurrency = cfg.prefetch
	}
	s := store.Settings()
	if err := s.CheckScope(); err != nil {
		return nil, configError("%w", err)
	}
	w := &Worker[V, T]{url: url, store: store, topo: topo.withDefaults(), decode: decode, handle: handler, cfg: cfg,
		log: cfg.logger, maxAttempts: cfg.maxAttempts, user: uri.Username, vhost: uri.Vhost,
		obs: s.Observers, scope: s.Scope, hooks: hooksOf(s.Observers)}
	if cfg.ordering.ordered() {
		w.lanes = ordering.NewSequencer[*delivery[V, T]]()
	}
	w.notReady(errNotStarted)
	if w.log == nil {
		w.log = s.Logger
	}
	if w.maxAttempts == 0 {
		w.maxAttempts = s.MaxAttempts
	}
	if s.Lease >= cfg.consumerTimeout {
		w.log.Warn("amqp: the store's lease is not below the broker's consumer_timeout: a handler that runs that long has its channel closed by the broker and its delivery requeued while its claim still holds; raise consumer_timeout on the broker (and tell WithConsumerTimeout) or shorten the lease",
			"lease", s.Lease, "consumer_timeout", cfg.consumerTimeout)
	}
	if !topo.Quorum {
		w.log.Info("amqp: classic queues: a message dead-lettered from a retry queue back to the work queue can be lost if the broker fails between the two (classic dead-lettering is at most once); quorum queues (Topology.Quorum) dead-letter at least once")
	}
	return w, nil
}

// Run consumes until ctx is cancelled, reconnecting whenever the connection or a
// channel is lost. It returns nil after a cancellation, or the error that makes
// going on pointless: a *RefusedError (credentials, vhost, permissions) or a
// *TopologyConflictError. Run may be called once.
func (w *Worker[V, T]) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("amqp: Run called twice")
	}
	err := w.run(ctx)
	if err != nil {
		w.notReady(err)
	} else {
		w.notReady(errStopped)
	}
	return err
}

func (w *Worker[V, T]) run(ctx context.Context) error {
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	stopGrace := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(w.cfg.shutdownGrace, cancelWork)
		context.AfterFunc(work, func() { t.Stop() })
	})
	defer stopGrace()

	failures := 0
	guessed := false // the last session ended with the client library's guess of a refusal
	for {
		began := time.Now()
		err := w.session(ctx, work)
		if ctx.Err() != nil {
			return nil
		}
		if err := permanent(err, w.refusal(err, false), &guessed); err != nil {
			return err
		}
		if time.Since(began) > time.Minute {
			failures = 0
		}
		failures++
		pause := retry.Backoff(w.cfg.backoffBase, w.cfg.backoffMax, failures)
		w.notReady(fmt.Errorf("reconnecting after: %w", err))
		w.log.Warn("amqp: session lost; reconnecting", "err", err, "in", pause)
		w.reportPause(err)
		w.lost = true
		if !retry.Sleep(ctx, pause) {
			return nil
		}
	}
}

// permanent returns err when reconnecting cannot cure it: a topology conflict, or
// a refusal (r) of the broker's own, or the client library's guess of one that
// the previous session ended with too (*guessed records this one).
func permanent(err error, r *RefusedError, guessed *bool) error {
	var conflict *TopologyConflictError
	switch {
	case errors.As(err, &conflict):
		return err
	case r != nil && (!r.guessed || *guessed):
		return r
	}
	*guessed = r != nil
	return nil
}

// session runs one connection until it fails or ctx is cancelled.
func (w *Worker[V, T]) session(ctx, work context.Context) error {
	var cork *corkConn
	conn, err := w.connect(ctx, false, &cork)
	if err != nil {
		return err
	}
	defer conn.Close()
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
	subClosed := sub.NotifyClose(make(chan *amqp091.Error, 1))
	deliveries, err := sub.ConsumeWithContext(ctx, w.topo.Queue, w.cfg.name+"-"+token(), false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("amqp: consume %q: %w", w.topo.Queue, err)
	}
	p := &publisher{conn: conn, ch: pub, returns: returns, closed: pub.NotifyClose(make(chan *amqp091.Error, 1))}
	f, err := w.newFlow(work, sub, p, cork)
	if err != nil {
		return err
	}
	defer f.stop(ctx, work)
	w.ready.Store(nil)
	if w.lost {
		w.lost = false
		w.reportPause(nil)
	}
	for {
		d, ok := <-deliveries
		if !ok {
			if ctx.Err() != nil {
				return nil
			}
			select {
			case err := <-f.fail:
				return err
			case cerr := <-closed:
				return closedError("connection", cerr)
			case cerr := <-subClosed:
				return closedError("consuming channel", cerr)
			default:
				return errors.New("amqp: consumer channel closed")
			}
		}
		if err := f.take(&d); err != nil {
			return err
		}
	}
}

// closedError says what closed and the broker's reason, if it gave one.
func closedError(what string, cerr *amqp091.Error) error {
	if cerr == nil {
		return fmt.Errorf("amqp: the %s closed", what)
	}
	return fmt.Errorf("amqp: the %s closed: %w", what, cerr)
}

// connect dials the broker and declares the topology (WithDeclare), or with
// verify checks that its queues exist. A refusal of the login or the vhost comes
// back as a *RefusedError. The dial is bounded by ctx's deadline and dialTimeout.
// *cork is set to the connection's socket (corkConn).
func (w *Worker[V, T]) connect(ctx context.Context, verify bool, cork **corkConn) (*amqp091.Connection, error) {
	timeout := dialTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(min(timeout, time.Until(dl)), time.Millisecond)
	}
	began := time.Now()
	conn, err := amqp091.DialConfig(w.url, amqp091.Config{
		Properties: amqp091.Table{"connection_name": w.cfg.name},
		Heartbeat:  w.cfg.heartbeat,
		Dial:       dialCorked(timeout, cork),
	})
	if err != nil {
		// The client library takes a login that ran out of time for a refusal too.
		if r := w.refusal(err, true); r != nil && !(r.guessed && time.Since(began) >= timeout) {
			return nil, r
		}
		return nil, fmt.Errorf("%w: %w", errDial, err)
	}
	switch {
	case w.cfg.declare:
		err = w.topo.Declare(conn)
	case verify:
		err = w.topo.verify(conn)
	}
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	return conn, nil
}

// dialTimeout bounds a dial: the TCP connection and the login.
const dialTimeout = 5 * time.Second

// errDial marks a failed dial that is not a refusal (connect judged it).
var errDial = errors.New("amqp: dial")

// prepare decodes d and finds its key.
func (w *Worker[V, T]) prepare(d *amqp091.Delivery) (V, consumer.Key, error) {
	var v V
	var err error
	if !w.skipDecode {
		v, err = w.decode(*d)
	}
	if err != nil {
		return v, consumer.Key(d.MessageId), fmt.Errorf("%w: %v", ErrUndecodable, err)
	}
	var key consumer.Key
	switch {
	case w.cfg.keyFunc != nil:
		key, err = w.cfg.keyFunc(*d, v)
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

// publisher republishes on a channel in confirm mode, one message at a time.
type publisher struct {
	mu      sync.Mutex
	conn    *amqp091.Connection
	ch      *amqp091.Channel
	returns chan amqp091.Return
	closed  chan *amqp091.Error
	sealed  atomic.Bool // the shutdown grace ran out: nothing more is sent
}

// errSealed: a copy not sent because the shutdown grace ran out; its original
// returns to the queue.
var errSealed = errors.New("amqp: shutting down: copy not sent")

// seal stops sending: a publish that has not sent its copy yet returns errSealed.
func (p *publisher) seal() { p.sealed.Store(true) }

// publish copies d to queue (through the default exchange) with extra headers and
// waits for the broker's confirm; an unroutable message is an error. With
// bodyLessOK, a copy the broker refuses for its size is replaced by one without
// the body and the message's own headers (bodyLess reports it).
func (p *publisher) publish(ctx context.Context, queue string, d *amqp091.Delivery, extra amqp091.Table, bodyLessOK bool) (bodyLess bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	headers := amqp091.Table{}
	for k, v := range d.Headers {
		headers[k] = v
	}
	for k, v := range extra {
		headers[k] = v
	}
	msg := amqp091.Publishing{
		Headers: headers, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
		DeliveryMode: amqp091.Persistent, Priority: d.Priority, CorrelationId: d.CorrelationId, ReplyTo: d.ReplyTo,
		MessageId: d.MessageId, Timestamp: d.Timestamp, Type: d.Type, AppId: d.AppId, Body: d.Body,
	}
	// A header table must fit in one frame, or the broker closes the connection: a
	// copy whose headers are too large goes with the idemkit headers only.
	if !bodyLessOK || tableSize(headers) <= maxHeaderTable {
		err = p.send(ctx, queue, msg)
		if err == nil || !bodyLessOK || !tooLarge(err) {
			return false, err
		}
		// The broker closed the channel over the size: a new one, and the copy
		// without its body.
		if err := p.reopen(); err != nil {
			return false, err
		}
	}
	msg.Body, msg.Headers = nil, amqp091.Table{HeaderBodyLess: "true"}
	for k, v := range extra {
		msg.Headers[k] = v
	}
	return true, p.send(ctx, queue, msg)
}

// send publishes msg and waits for its confirm, unless the publisher is sealed. A
// copy once sent is waited for whatever ctx does (up to confirmTimeout): its
// original is acked only after it, and must not be put back beside it.
func (p *publisher) send(ctx context.Context, queue string, msg amqp091.Publishing) error {
	if p.sealed.Load() {
		return errSealed
	}
	ctx = context.WithoutCancel(ctx)
	conf, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, msg)
	if err != nil {
		return fmt.Errorf("amqp: republish to %q: %w", queue, err)
	}
	wctx, cancel := context.WithTimeout(ctx, confirmTimeout)
	defer cancel()
	var acked bool
	select {
	case <-conf.Done():
		acked = conf.Acked()
	case cerr := <-p.closed:
		if cerr != nil {
			return fmt.Errorf("amqp: republish to %q: %w", queue, cerr)
		}
		return fmt.Errorf("amqp: republish to %q: the channel closed", queue)
	case <-wctx.Done():
		return fmt.Errorf("amqp: republish to %q: no confirm: %w", queue, wctx.Err())
	}
	if !acked {
		return fmt.Errorf("amqp: republish to %q: the broker refused it (nack)", queue)
	}
	select {
	case ret := <-p.returns:
		return fmt.Errorf("amqp: republish to %q: unroutable (%s): declare the topology", queue, ret.ReplyText)
	default:
		return nil
	}
}

func (p *publisher) reopen() error {
	ch, err := p.conn.Channel()
	if err != nil {
		return fmt.Errorf("amqp: reopen the publishing channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("amqp: publisher confirms: %w", err)
	}
	p.ch, p.returns, p.closed = ch, ch.NotifyReturn(make(chan amqp091.Return, 1)), ch.NotifyClose(make(chan *amqp091.Error, 1))
	return nil
}

// confirmTimeout bounds the wait for the broker's confirm of a copy.
const confirmTimeout = 30 * time.Second

// maxHeaderTable is the largest header table a dead-letter copy keeps whole: half
// of RabbitMQ's default frame_max (128 KiB), leaving room for the frame's other
// fields whatever the broker negotiated above the minimum.
const maxHeaderTable = 64 << 10

// tableSize estimates the encoded size of a header table (names and string or
// byte values; other values count 16 bytes).
func tableSize(t amqp091.Table) int {
	n := 0
	for k, v := range t {
		n += len(k) + 2
		switch x := v.(type) {
		case string:
			n += len(x) + 5
		case []byte:
			n += len(x) + 5
		case amqp091.Table:
			n += tableSize(x) + 5
		default:
			n += 16
		}
	}
	return n
}

// tooLarge reports whether the broker refused a message for its size (RabbitMQ
// closes the channel with PRECONDITION_FAILED naming the size limit).
func tooLarge(err error) bool {
	var aerr *amqp091.Error
	return errors.As(err, &aerr) && aerr.Code == amqp091.PreconditionFailed && strings.Contains(strings.ToLower(aerr.Reason), "size")
}

// attemptsOf reads the adapter's attempt header (0 when absent).
func attemptsOf(d *amqp091.Delivery) int {
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

func token() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
