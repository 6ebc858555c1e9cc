package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/kafkaconf"
	"github.com/idemkit/idemkit/internal/kafkadl"
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
	DefaultKeyHeader = kafkaconf.DefaultKeyHeader

	HeaderOriginalTopic     = kafkadl.HeaderOriginalTopic
	HeaderOriginalPartition = kafkadl.HeaderOriginalPartition
	HeaderOriginalOffset    = kafkadl.HeaderOriginalOffset
	HeaderKey               = kafkadl.HeaderKey
	HeaderAttempts          = kafkadl.HeaderAttempts
	HeaderOutcome           = kafkadl.HeaderOutcome
	HeaderError             = kafkadl.HeaderError
	// HeaderKind is the machine-readable reason of a dead letter: PERMANENT,
	// CONFLICT, EXHAUSTED, UNDECODABLE, NO_KEY, ... (consumer.DeadLetterKind).
	HeaderKind = kafkadl.HeaderKind
	// HeaderBodyLess is "true" on a dead letter whose body was left out because the
	// broker refused the full copy (too large); the original is at its coordinates.
	HeaderBodyLess = kafkadl.HeaderBodyLess
)

// MaxErrorHeader is the longest error text a dead-letter copy carries; longer
// texts are cut with a marker.
const MaxErrorHeader = kafkadl.MaxErrorHeader

// Ordering says which records of a partition may run at the same time.
type Ordering int

const (
	// ByKey runs the records of one Kafka record key (an account, an order) one
	// at a time, in offset order, and records of different keys at once (the
	// default); records without a record key are ordered by their idempotency key.
	ByKey Ordering = iota
	// ByPartition runs the records of a partition one at a time, in offset order.
	ByPartition
	// Unordered runs records as they come (two records of one key still never run
	// at once).
	Unordered
)

func (o Ordering) String() string {
	switch o {
	case ByKey:
		return "key"
	case ByPartition:
		return "partition"
	case Unordered:
		return "unordered"
	}
	return "Ordering(" + strconv.Itoa(int(o)) + ")"
}

// KeyFunc returns a record's idempotency key. v is the decoded value (the record
// itself for New).
type KeyFunc func(rec *kgo.Record, v any) (consumer.Key, error)

// Option configures the adapter. Every option states its default.
type Option interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	kafkaconf.Shared // key header or function, dead-letter topics, backoff, logger
	createDLQ        bool
	dlqPartitions    int32
	dlqReplication   int16
	ordering         Ordering
	inFlight         int
	handlers         int
	partitionLimit   int
	maxPoll          int
	revokeDrain      time.Duration
	commitEvery      time.Duration
	shutdownGrace    time.Duration
	onAssigned       func(context.Context, *kgo.Client, map[string][]int32)
	onRevoked        func(context.Context, *kgo.Client, map[string][]int32)
	onLost           func(context.Context, *kgo.Client, map[string][]int32)
}

func defaults() config {
	return config{
		Shared:         kafkaconf.Defaults(),
		ordering:       ByKey,
		inFlight:       1024,
		handlers:       1024,
		partitionLimit: 1024,
		maxPoll:        1000,
		revokeDrain:    5 * time.Second,
		commitEvery:    100 * time.Millisecond,
		shutdownGrace:  10 * time.Second,
	}
}

// WithKeyHeader reads the key from the named header. Default "Idempotency-Key";
// records without it get a key from their coordinates (see the package doc).
func WithKeyHeader(name string) Option { return optFunc(func(c *config) { c.KeyHeader = name }) }

// WithKeyFunc computes the key of every record; it replaces the header lookup. A
// returned error dead-letters the record with that reason. Default: none.
func WithKeyFunc(fn func(rec *kgo.Record) (consumer.Key, error)) Option {
	return optFunc(func(c *config) { c.KeyFunc = kafkaconf.RecordKey(fn) })
}

// WithValueKey takes the key from the decoded value (a field of the event) for a
// consumer made with NewTyped[V]. A returned error dead-letters the record.
// Default: none.
func WithValueKey[V any](fn func(v V) (consumer.Key, error)) Option {
	return optFunc(func(c *config) { c.KeyFunc, c.ValueType = kafkaconf.ValueKey(fn) })
}

// WithDeadLetterTopic names the dead-letter topic of each consumed topic. Default
// "<topic>.dlq". Each must exist when Run starts (for a topic found by
// kgo.ConsumeRegex, when it is first assigned), or be created by
// WithCreateDeadLetterTopics.
func WithDeadLetterTopic(fn func(topic string) string) Option {
	return optFunc(func(c *config) { c.DeadLetter = fn })
}

// WithCreateDeadLetterTopics has the consumer create the dead-letter topics that
// do not exist, with partitions partitions and replication replicas each; -1 takes
// the broker's default (num.partitions, default.replication.factor; Kafka 2.4 and
// later). The consumer's principal needs CREATE on them. Default: off, and Run
// refuses to start while a named topic's dead-letter topic is missing (see the
// package doc).
func WithCreateDeadLetterTopics(partitions int32, replication int16) Option {
	return optFunc(func(c *config) { c.createDLQ, c.dlqPartitions, c.dlqReplication = true, partitions, replication })
}

// WithOrdering says which records may run at once: ByKey (default), ByPartition
// or Unordered. Commits are of the settled prefix of each partition in every mode.
func WithOrdering(o Ordering) Option { return optFunc(func(c *config) { c.ordering = o }) }

// WithInFlight bounds the records that are claimed, running or being settled at
// once, over all partitions (the engine's window). Default 1024, sized for handlers
// that wait on I/O for a few milliseconds: a record holds its place in the window
// for its claim's round trip, its handler and its completion's round trip, so the
// window divided by that whole time bounds the throughput (with a 2 ms handler and
// about 10 ms of batched round trips on a busy host, 1024 / 12 ms = 85,000
// records/s, where 256 would allow 21,000). See the package doc.
func WithInFlight(n int) Option { return optFunc(func(c *config) { c.inFlight = n }) }

// WithConcurrency bounds the handlers running at once. Default 1024 (as many as
// the in-flight window, so that every claimed record has a handler at once, for
// I/O-bound handlers); lower it for CPU-bound ones, or to what the resource the
// handlers share (a database pool) takes, and lower WithInFlight with it.
func WithConcurrency(n int) Option { return optFunc(func(c *config) { c.handlers = n }) }

// WithPartitionInFlight bounds the records of one partition taken and not yet
// settled; a partition at the bound is paused (its fetches stop) until half of them
// settled, and the other partitions go on. It is meant for a partition that is
// stuck (a stalled record in ByPartition, many records of a stalled key), not for
// the normal flow, which the in-flight window paces. Default 1024.
func WithPartitionInFlight(n int) Option { return optFunc(func(c *config) { c.partitionLimit = n }) }

// WithMaxPollRecords bounds the records taken per poll. Default 1000.
func WithMaxPollRecords(n int) Option { return optFunc(func(c *config) { c.maxPoll = n }) }

// WithBackoff sets the retry backoff of a record whose handler failed with a
// retryable error: base doubling up to max, with full jitter. A retrying record
// holds back only its key (and its partition's commit point). Default 100ms to 5s.
func WithBackoff(base, max time.Duration) Option {
	return optFunc(func(c *config) { c.BackoffBase, c.BackoffMax = base, max })
}

// WithRevokeDrain bounds how long a revocation waits for the revoked partitions'
// records to settle before it commits their settled prefix and lets the rebalance
// go on; records still running then see their contexts cancelled and run again on
// the partition's next owner. It bounds how long this member holds up a rebalance;
// keep it below the group's rebalance timeout. Default 5s.
func WithRevokeDrain(d time.Duration) Option { return optFunc(func(c *config) { c.revokeDrain = d }) }

// WithCommitInterval sets how often the settled prefix of each partition is
// committed. Default 100ms.
func WithCommitInterval(d time.Duration) Option {
	return optFunc(func(c *config) { c.commitEvery = d })
}

// WithShutdownGrace bounds how long the records taken may still settle after Run's
// context is cancelled; then running handlers see their contexts cancelled. Default
// 10s.
func WithShutdownGrace(d time.Duration) Option {
	return optFunc(func(c *config) { c.shutdownGrace = d })
}

// WithLogger sets the logger. Default: the store's logger.
func WithLogger(l *slog.Logger) Option { return optFunc(func(c *config) { c.Logger = l }) }

// WithOnAssigned, WithOnRevoked and WithOnLost run fn after the adapter's own
// handling of the group event (kgo's callbacks of that name are the adapter's).
func WithOnAssigned(fn func(context.Context, *kgo.Client, map[string][]int32)) Option {
	return optFunc(func(c *config) { c.onAssigned = fn })
}

// WithOnRevoked: see WithOnAssigned.
func WithOnRevoked(fn func(context.Context, *kgo.Client, map[string][]int32)) Option {
	return optFunc(func(c *config) { c.onRevoked = fn })
}

// WithOnLost: see WithOnAssigned.
func WithOnLost(fn func(context.Context, *kgo.Client, map[string][]int32)) Option {
	return optFunc(func(c *config) { c.onLost = fn })
}

// validate checks the options of this adapter only (kafkaconf.Check the shared
// ones).
func (c *config) validate() error {
	switch {
	case c.createDLQ && (c.dlqPartitions == 0 || c.dlqPartitions < -1 || c.dlqReplication == 0 || c.dlqReplication < -1):
		return configError("WithCreateDeadLetterTopics(%d, %d): give at least 1 partition and 1 replica, or -1 for the broker's default",
			c.dlqPartitions, c.dlqReplication)
	case c.ordering < ByKey || c.ordering > Unordered:
		return configError("WithOrdering(%v): give ByKey, ByPartition or Unordered", c.ordering)
	case c.inFlight < 1 || c.handlers < 1 || c.partitionLimit < 1:
		return configError("WithInFlight(%d), WithConcurrency(%d), WithPartitionInFlight(%d): give at least 1 each", c.inFlight, c.handlers, c.partitionLimit)
	case c.maxPoll < 1:
		return configError("WithMaxPollRecords(%d): give at least 1", c.maxPoll)
	case c.revokeDrain < 0 || c.shutdownGrace < 0:
		return configError("negative duration in WithRevokeDrain or WithShutdownGrace")
	case c.commitEvery <= 0:
		return configError("WithCommitInterval(%v): give a positive interval", c.commitEvery)
	}
	return nil
}
