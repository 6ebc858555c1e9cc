package amqp

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/idemkit/idemkit/consumer"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// ErrConfig is matched by every configuration error of NewWorker and NewTypedWorker.
var ErrConfig = errors.New("amqp: invalid configuration")

func configError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
}

// Headers the adapter writes.
const (
	HeaderAttempts        = "x-idemkit-attempts"
	HeaderReason          = "x-idemkit-reason"
	HeaderOutcome         = "x-idemkit-outcome"
	HeaderKey             = "x-idemkit-key"
	HeaderOriginalQueue   = "x-idemkit-original-queue"
	HeaderOriginalExch    = "x-idemkit-original-exchange"
	HeaderOriginalRouting = "x-idemkit-original-routing-key"
	// HeaderKind is a dead letter's machine-readable reason: PERMANENT, CONFLICT,
	// EXHAUSTED, UNDECODABLE, NO_KEY, ... (consumer.DeadLetterKind).
	HeaderKind = "x-idemkit-kind"
	// HeaderBodyLess is "true" on a dead letter whose body the broker refused for
	// size: the copy carries the idemkit headers only.
	HeaderBodyLess = "x-idemkit-body-less"
)

// MaxErrorHeader is the longest error text a dead-letter copy carries (a header
// table must fit in one frame); longer texts are cut with a marker.
const MaxErrorHeader = 4 << 10

// KeyFunc returns a delivery's idempotency key; v is the decoded body (the delivery
// itself for NewWorker).
type KeyFunc func(d amqp091.Delivery, v any) (consumer.Key, error)

// Option configures a worker. Every option states its default.
type Option interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	prefetch        int
	concurrency     int
	maxAttempts     int
	keyHeader       string
	keyFunc         KeyFunc
	valueType       reflect.Type
	ordering        Ordering
	declare         bool
	shutdownGrace   time.Duration
	consumerTimeout time.Duration
	backoffBase     time.Duration
	backoffMax      time.Duration
	heartbeat       time.Duration
	name            string
	logger          *slog.Logger
}

func defaults() config {
	return config{
		prefetch:        256,
		concurrency:     0, // the prefetch
		declare:         true,
		shutdownGrace:   10 * time.Second,
		consumerTimeout: 30 * time.Minute,
		backoffBase:     100 * time.Millisecond,
		backoffMax:      10 * time.Second,
		heartbeat:       10 * time.Second,
		name:            "idemkit-worker",
	}
}

// WithPrefetch sets the channel's prefetch count: how many unacked deliveries the
// broker sends ahead, which is also the engine's in-flight window. Default 256,
// sized for handlers that wait on I/O for milliseconds (256 / 2 ms = 128,000
// messages/s at most).
func WithPrefetch(n int) Option { return optFunc(func(c *config) { c.prefetch = n }) }

// WithConcurrency sets how many handlers run at once (at most the prefetch).
// Default: the prefetch (256), for I/O-bound handlers; lower it for CPU-bound ones.
func WithConcurrency(n int) Option { return optFunc(func(c *config) { c.concurrency = n }) }

// WithMaxAttempts sets after how many deliveries (the adapter's x-idemkit-attempts
// header) a message still failing or in progress goes to the dead-letter queue.
// Default: the store's max attempts.
func WithMaxAttempts(n int) Option { return optFunc(func(c *config) { c.maxAttempts = n }) }

// WithKeyHeader reads the key from the named header instead of MessageId.
// Default "": the MessageId.
func WithKeyHeader(name string) Option { return optFunc(func(c *config) { c.keyHeader = name }) }

// WithKeyFunc computes every delivery's key. Default none.
func WithKeyFunc(fn func(d amqp091.Delivery) (consumer.Key, error)) Option {
	return optFunc(func(c *config) {
		c.keyFunc = nil
		if fn != nil {
			c.keyFunc = func(d amqp091.Delivery, _ any) (consumer.Key, error) { return fn(d) }
		}
	})
}

// WithValueKey takes the key from the decoded body of a NewTypedWorker[V]. Default none.
func WithValueKey[V any](fn func(v V) (consumer.Key, error)) Option {
	return optFunc(func(c *config) {
		c.valueType, c.keyFunc = reflect.TypeFor[V](), nil
		if fn != nil {
			c.keyFunc = func(_ amqp091.Delivery, v any) (consumer.Key, error) { return fn(v.(V)) }
		}
	})
}

// WithOrdering says which deliveries may run at once: Unordered (the default)
// runs them as they come; ByKeyHeader, ByKeyFunc and ByValueKey run the deliveries
// of one ordering key one at a time, in the order they arrived, and different keys
// at once (see Ordering). Acknowledgements are the same in every mode: each
// delivery is acked once settled, a multiple-ack covering only the contiguous
// settled prefix of the channel's tags, so a key that stalls holds back only the
// later deliveries of its key. Default Unordered.
func WithOrdering(o Ordering) Option { return optFunc(func(c *config) { c.ordering = o }) }

// WithDeclare turns declaring the topology at every (re)connection on or off.
// Default on.
func WithDeclare(on bool) Option { return optFunc(func(c *config) { c.declare = on }) }

// WithConsumerTimeout tells the worker the broker's consumer_timeout (RabbitMQ's
// default is 30 minutes): a delivery unacked for that long has its channel closed.
// The worker warns at construction when the store's lease is not below it. It
// cannot read the broker's setting over AMQP. Default 30m.
func WithConsumerTimeout(d time.Duration) Option {
	return optFunc(func(c *config) { c.consumerTimeout = d })
}

// WithShutdownGrace bounds how long the deliveries taken may still settle after
// Run's context is cancelled, their dead-letter and retry copies confirmed and
// their originals acked; then running handlers see their contexts cancelled, no
// further copy is sent, and what is not settled returns to the queue whole.
// Default 10s.
func WithShutdownGrace(d time.Duration) Option {
	return optFunc(func(c *config) { c.shutdownGrace = d })
}

// WithReconnectBackoff sets the reconnection backoff: base doubling to max, with
// full jitter. Default 100ms to 10s.
func WithReconnectBackoff(base, max time.Duration) Option {
	return optFunc(func(c *config) { c.backoffBase, c.backoffMax = base, max })
}

// WithHeartbeat sets the AMQP heartbeat interval the worker asks for (the broker
// may lower it, never raise it): a connection that hears nothing from the broker
// for three intervals is taken as lost, as a network partition leaves it (no
// error, no reset), and the worker reconnects; its unacked deliveries went back
// to the queue with it. AMQP counts whole seconds: give 1s to 18h12m15s.
// Default 10s.
func WithHeartbeat(d time.Duration) Option { return optFunc(func(c *config) { c.heartbeat = d }) }

// WithName sets the connection name shown by the broker and the consumer tag
// prefix. Default "idemkit-worker".
func WithName(name string) Option { return optFunc(func(c *config) { c.name = name }) }

// WithLogger sets the logger. Default: the store's.
func WithLogger(l *slog.Logger) Option { return optFunc(func(c *config) { c.logger = l }) }

func (c *config) validate() error {
	switch {
	case c.prefetch < 1:
		return configError("WithPrefetch(%d): give at least 1", c.prefetch)
	case c.concurrency < 0:
		return configError("WithConcurrency(%d): give at least 1", c.concurrency)
	case c.concurrency > c.prefetch:
		return configError("WithConcurrency(%d) above WithPrefetch(%d): handlers would wait for deliveries that never come", c.concurrency, c.prefetch)
	case c.maxAttempts < 0:
		return configError("WithMaxAttempts(%d): give at least 1", c.maxAttempts)
	case c.backoffBase <= 0 || c.backoffMax < c.backoffBase:
		return configError("WithReconnectBackoff(%v, %v): give 0 < base <= max", c.backoffBase, c.backoffMax)
	case c.heartbeat < time.Second || c.heartbeat > 65535*time.Second || c.heartbeat%time.Second != 0:
		return configError("WithHeartbeat(%v): give whole seconds from 1s to 18h12m15s (AMQP counts heartbeats in seconds)", c.heartbeat)
	case c.shutdownGrace < 0 || c.consumerTimeout <= 0:
		return configError("WithShutdownGrace(%v), WithConsumerTimeout(%v): give 0 or more, and a positive timeout", c.shutdownGrace, c.consumerTimeout)
	}
	return nil
}
