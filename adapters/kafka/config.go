package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrConfig is matched by every configuration error of New and NewTyped.
var ErrConfig = errors.New("kafka: invalid configuration")

func configError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
}

// Header names the adapter reads and writes.
const (
	// DefaultKeyHeader carries the idempotency key of a record.
	DefaultKeyHeader = "Idempotency-Key"

	HeaderOriginalTopic     = "idemkit-original-topic"
	HeaderOriginalPartition = "idemkit-original-partition"
	HeaderOriginalOffset    = "idemkit-original-offset"
	HeaderKey               = "idemkit-key"
	HeaderAttempts          = "idemkit-attempts"
	HeaderOutcome           = "idemkit-outcome"
	HeaderError             = "idemkit-error"
)

// KeyFunc returns a record's idempotency key. v is the decoded value (the record
// itself for New).
type KeyFunc func(rec *kgo.Record, v any) (consumer.Key, error)

// Opt configures the adapter. Every option states its default.
type Opt interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	keyHeader      string
	keyFunc        KeyFunc
	valueType      reflect.Type // the V a WithValueKey expects
	deadLetter     func(topic string) string
	maxPoll        int
	backoffBase    time.Duration
	backoffMax     time.Duration
	inProgressWait time.Duration
	retryLater     time.Duration
	dlqTries       int
	shutdownGrace  time.Duration
	perMessage     bool
	hooks          []Hook
	logger         *slog.Logger
	onAssigned     func(context.Context, *kgo.Client, map[string][]int32)
	onRevoked      func(context.Context, *kgo.Client, map[string][]int32)
	onLost         func(context.Context, *kgo.Client, map[string][]int32)
}

func defaults() config {
	return config{
		keyHeader:     DefaultKeyHeader,
		deadLetter:    func(topic string) string { return topic + ".dlq" },
		maxPoll:       1000,
		backoffBase:   100 * time.Millisecond,
		backoffMax:    5 * time.Second,
		retryLater:    10 * time.Second,
		dlqTries:      5,
		shutdownGrace: 10 * time.Second,
	}
}

// WithKeyHeader reads the key from the named header. Default "Idempotency-Key";
// records without it get a key from their coordinates (see the package doc).
func WithKeyHeader(name string) Opt { return optFunc(func(c *config) { c.keyHeader = name }) }

// WithKeyFunc computes the key of every record; it replaces the header lookup. A
// returned error dead-letters the record with that reason. Default: none.
func WithKeyFunc(fn func(rec *kgo.Record) (consumer.Key, error)) Opt {
	return optFunc(func(c *config) {
		if fn == nil {
			c.keyFunc = nil
			return
		}
		c.keyFunc = func(rec *kgo.Record, _ any) (consumer.Key, error) { return fn(rec) }
	})
}

// WithValueKey takes the key from the decoded value (a field of the event) for a
// consumer made with NewTyped[V]. A returned error dead-letters the record.
// Default: none.
func WithValueKey[V any](fn func(v V) (consumer.Key, error)) Opt {
	return optFunc(func(c *config) {
		c.valueType = reflect.TypeFor[V]()
		if fn == nil {
			c.keyFunc = nil
			return
		}
		c.keyFunc = func(_ *kgo.Record, v any) (consumer.Key, error) { return fn(v.(V)) }
	})
}

// WithDeadLetterTopic names the dead-letter topic of each consumed topic. Default
// "<topic>.dlq".
func WithDeadLetterTopic(fn func(topic string) string) Opt {
	return optFunc(func(c *config) { c.deadLetter = fn })
}

// WithMaxPollRecords bounds the records taken per poll. Default 1000.
func WithMaxPollRecords(n int) Opt { return optFunc(func(c *config) { c.maxPoll = n }) }

// WithBackoff sets the in-place retry backoff: base doubling up to max, with full
// jitter. Default 100ms to 5s.
func WithBackoff(base, max time.Duration) Opt {
	return optFunc(func(c *config) { c.backoffBase, c.backoffMax = base, max })
}

// WithInProgressWait bounds how long a record found IN_PROGRESS is waited for
// before it is left to the next poll. Default: the store's lease plus one second,
// so a dead owner's claim can run out and be taken over.
func WithInProgressWait(d time.Duration) Opt {
	return optFunc(func(c *config) { c.inProgressWait = d })
}

// WithRetryLater bounds how long a record is retried in place while the store is
// unreachable before its partition is left to the next poll. Default 10s.
func WithRetryLater(d time.Duration) Opt { return optFunc(func(c *config) { c.retryLater = d }) }

// WithDeadLetterTries bounds the produce attempts of one dead-letter copy before the
// record is left to the next poll. Default 5.
func WithDeadLetterTries(n int) Opt { return optFunc(func(c *config) { c.dlqTries = n }) }

// WithShutdownGrace bounds how long the current poll's records may still run after
// Run's context is cancelled. Default 10s.
func WithShutdownGrace(d time.Duration) Opt { return optFunc(func(c *config) { c.shutdownGrace = d }) }

// WithPerMessageCompletion completes each record in the store as soon as its
// handler returns (one round trip each) instead of once per partition batch, which
// narrows the window in which a crash re-runs finished handlers. Default off.
func WithPerMessageCompletion(on bool) Opt { return optFunc(func(c *config) { c.perMessage = on }) }

// WithHooks adds observers (see Hook). Default none.
func WithHooks(hooks ...Hook) Opt {
	return optFunc(func(c *config) { c.hooks = append(c.hooks, hooks...) })
}

// WithLogger sets the logger. Default: the store's logger.
func WithLogger(l *slog.Logger) Opt { return optFunc(func(c *config) { c.logger = l }) }

// WithOnAssigned, WithOnRevoked and WithOnLost run fn after the adapter's own
// handling of the group event (kgo's callbacks of that name are the adapter's).
func WithOnAssigned(fn func(context.Context, *kgo.Client, map[string][]int32)) Opt {
	return optFunc(func(c *config) { c.onAssigned = fn })
}

// WithOnRevoked: see WithOnAssigned.
func WithOnRevoked(fn func(context.Context, *kgo.Client, map[string][]int32)) Opt {
	return optFunc(func(c *config) { c.onRevoked = fn })
}

// WithOnLost: see WithOnAssigned.
func WithOnLost(fn func(context.Context, *kgo.Client, map[string][]int32)) Opt {
	return optFunc(func(c *config) { c.onLost = fn })
}

func (c *config) validate() error {
	switch {
	case c.keyFunc == nil && c.keyHeader == "":
		return configError("empty key header: omit WithKeyHeader for %q, or give WithKeyFunc", DefaultKeyHeader)
	case c.deadLetter == nil:
		return configError("nil dead-letter topic function: omit WithDeadLetterTopic for <topic>.dlq")
	case c.maxPoll < 1:
		return configError("WithMaxPollRecords(%d): give at least 1", c.maxPoll)
	case c.backoffBase <= 0 || c.backoffMax < c.backoffBase:
		return configError("WithBackoff(%v, %v): give 0 < base <= max", c.backoffBase, c.backoffMax)
	case c.inProgressWait < 0 || c.retryLater < 0 || c.shutdownGrace < 0:
		return configError("negative duration in WithInProgressWait, WithRetryLater or WithShutdownGrace")
	case c.dlqTries < 1:
		return configError("WithDeadLetterTries(%d): give at least 1", c.dlqTries)
	}
	return nil
}
