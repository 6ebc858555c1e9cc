package kafkashare

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/kafkaconf"
	"github.com/idemkit/idemkit/internal/kafkadl"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrConfig is matched by every configuration error of New and NewTyped.
var ErrConfig = errors.New("kafkashare: invalid configuration")

func configError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
}

// Header names the adapter reads and writes: the same as the classic adapter's
// (adapters/kafka), so one dead-letter reader serves both.
const (
	// DefaultKeyHeader carries the idempotency key of a record.
	DefaultKeyHeader = kafkaconf.DefaultKeyHeader

	HeaderOriginalTopic     = kafkadl.HeaderOriginalTopic
	HeaderOriginalPartition = kafkadl.HeaderOriginalPartition
	HeaderOriginalOffset    = kafkadl.HeaderOriginalOffset
	HeaderKey               = kafkadl.HeaderKey
	HeaderAttempts          = kafkadl.HeaderAttempts
	HeaderOutcome           = kafkadl.HeaderOutcome
	HeaderError             = kafkadl.HeaderError
	// HeaderKind is the machine-readable reason of a dead letter: PERMANENT,
	// CONFLICT, EXHAUSTED, UNDECODABLE, NO_KEY, DELIVERY_LIMIT, ...
	HeaderKind = kafkadl.HeaderKind
	// HeaderBodyLess is "true" on a dead letter whose body was left out because the
	// broker refused the full copy (too large).
	HeaderBodyLess = kafkadl.HeaderBodyLess
)

// KindDeliveryLimit is the dead-letter kind of a record whose handler failed
// retryably on the last delivery the group allows (WithDeliveryLimit): the broker
// would archive it on the next release, so it is copied first.
const KindDeliveryLimit = "DELIVERY_LIMIT"

// Option configures the adapter. Every option states its default.
type Option interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	kafkaconf.Shared // key header or function, dead-letter topics, backoff, logger
	brokerDLQ        bool
	clients          int
	handlers         int
	maxPoll          int
	busyHold         time.Duration
	margin           time.Duration
	deliveryLimit    int32
	shutdownGrace    time.Duration
}

func defaults() config {
	return config{
		Shared:        kafkaconf.Defaults(),
		clients:       1,
		handlers:      256,
		maxPoll:       500,
		busyHold:      time.Minute,
		margin:        2 * time.Second,
		deliveryLimit: 5,
		shutdownGrace: 10 * time.Second,
	}
}

// WithKeyHeader reads the key from the named header. Default "Idempotency-Key";
// a record without it gets a key derived from the share group and its coordinates.
func WithKeyHeader(name string) Option { return optFunc(func(c *config) { c.KeyHeader = name }) }

// WithKeyFunc computes the key of every record; it replaces the header lookup. A
// record it returns an error for is dead-lettered as NO_KEY. Default: none.
func WithKeyFunc(fn func(rec *kgo.Record) (consumer.Key, error)) Option {
	return optFunc(func(c *config) { c.KeyFunc = kafkaconf.RecordKey(fn) })
}

// WithValueKey takes the key from the decoded value (NewTyped's V). Default: none.
func WithValueKey[V any](fn func(v V) (consumer.Key, error)) Option {
	return optFunc(func(c *config) { c.KeyFunc, c.ValueType = kafkaconf.ValueKey(fn) })
}

// WithDeadLetterTopic names the dead-letter topic of each consumed topic. Default
// "<topic>.dlq". Each must exist before Run.
func WithDeadLetterTopic(fn func(topic string) string) Option {
	return optFunc(func(c *config) { c.DeadLetter = fn })
}

// WithBrokerDeadLetter hands records that must be dead-lettered to the broker's
// own handling (AckReject: the broker archives them, or copies them to its
// dead-letter topic where it has one) instead of producing idemkit's copy. Default
// off: idemkit's copy, then ACCEPT.
func WithBrokerDeadLetter() Option { return optFunc(func(c *config) { c.brokerDLQ = true }) }

// WithClients sets how many share-group members (kgo clients) the consumer runs.
// Every record of a poll is acknowledged before that client polls again, so one
// slow record holds back only its own client's next poll. Default 1.
func WithClients(n int) Option { return optFunc(func(c *config) { c.clients = n }) }

// WithConcurrency bounds the handlers running at once over all clients. Default 256.
func WithConcurrency(n int) Option { return optFunc(func(c *config) { c.handlers = n }) }

// WithMaxPollRecords bounds the records one poll of one client takes, strictly
// (kgo.ShareMaxRecords with kgo.ShareMaxRecordsStrict): the in-flight records of
// the consumer are at most WithClients times this. Default 500.
func WithMaxPollRecords(n int) Option { return optFunc(func(c *config) { c.maxPoll = n }) }

// WithBackoff sets the backoff of a record whose handler failed retryably (it is
// held, renewed, for the backoff, then released for redelivery) and of a store
// outage (held and tried again in place). Default 100ms doubling up to 5s.
func WithBackoff(base, max time.Duration) Option {
	return optFunc(func(c *config) { c.BackoffBase, c.BackoffMax = base, max })
}

// WithBusyHold bounds how long a record whose key another owner is running
// (IN_PROGRESS) is held, its acquisition lock renewed, before it is released to
// the broker. Default 1 minute.
func WithBusyHold(d time.Duration) Option { return optFunc(func(c *config) { c.busyHold = d }) }

// WithAcquisitionMargin is how long before a record's acquisition lock runs out
// its handler is cancelled (the attempt not counted) and the record released.
// The deadline franz-go reports is computed from the broker's answer and is
// earlier in practice, so keep a margin of a few seconds. Default 2s; at most a
// quarter of the group's share.record.lock.duration.ms is used.
func WithAcquisitionMargin(d time.Duration) Option { return optFunc(func(c *config) { c.margin = d }) }

// WithDeliveryLimit is the group's share.delivery.count.limit. The adapter warns
// as a record's delivery count reaches it, and on the last delivery it
// dead-letters a record whose handler failed retryably instead of releasing it
// (the broker would archive it without a copy). Default 5, Kafka's default.
func WithDeliveryLimit(n int) Option {
	return optFunc(func(c *config) { c.deliveryLimit = int32(min(n, 1<<30)) })
}

// WithShutdownGrace bounds how long the records held may still settle after Run's
// context ends; then running handlers are cancelled and their records released.
// Default 10s.
func WithShutdownGrace(d time.Duration) Option {
	return optFunc(func(c *config) { c.shutdownGrace = d })
}

// WithLogger sets the logger. Default: the store's logger.
func WithLogger(l *slog.Logger) Option { return optFunc(func(c *config) { c.Logger = l }) }

// validate checks the options of this adapter only (kafkaconf.Check the shared
// ones).
func (c *config) validate() error {
	switch {
	case c.clients < 1 || c.clients > 64:
		return configError("WithClients(%d): use 1 to 64", c.clients)
	case c.handlers < 1:
		return configError("WithConcurrency(%d): use at least 1", c.handlers)
	case c.maxPoll < 1 || c.maxPoll > 10000:
		return configError("WithMaxPollRecords(%d): use 1 to 10000", c.maxPoll)
	case c.busyHold <= 0:
		return configError("WithBusyHold(%v): must be positive", c.busyHold)
	case c.margin <= 0:
		return configError("WithAcquisitionMargin(%v): must be positive", c.margin)
	case c.deliveryLimit < 2:
		return configError("WithDeliveryLimit(%d): the broker's limit is at least 2", c.deliveryLimit)
	case c.shutdownGrace < 0:
		return configError("WithShutdownGrace(%v): must not be negative", c.shutdownGrace)
	}
	return nil
}
