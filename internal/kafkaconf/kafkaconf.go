// Package kafkaconf holds what the constructors of both Kafka adapters (classic
// groups in adapters/kafka, share groups in adapters/kafkashare) check alike: the
// store, decode and handler arguments, the options they share (key header or key
// function, dead-letter topic names, backoff, logger) and the store's scope. Each
// adapter keeps its own error type: it passes the function that makes its
// configuration errors, and the messages name the options as its users write them.
// Both also read the key header of a fetch's records alike (HeaderKeys).
package kafkaconf

import (
	"context"
	"log/slog"
	"reflect"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/typednil"
	"github.com/twmb/franz-go/pkg/kgo"
)

// DefaultKeyHeader is the header both adapters read the idempotency key from.
const DefaultKeyHeader = "Idempotency-Key"

// KeyFunc returns a record's idempotency key; v is the decoded value.
type KeyFunc func(rec *kgo.Record, v any) (consumer.Key, error)

// Shared is the part of both adapters' configurations that they check alike.
type Shared struct {
	KeyHeader   string
	KeyFunc     KeyFunc
	ValueType   reflect.Type // the V a WithValueKey expects; nil without one
	DeadLetter  func(topic string) string
	BackoffBase time.Duration
	BackoffMax  time.Duration
	Logger      *slog.Logger
}

// Defaults are the shared options' defaults.
func Defaults() Shared {
	return Shared{
		KeyHeader:   DefaultKeyHeader,
		DeadLetter:  func(topic string) string { return topic + ".dlq" },
		BackoffBase: 100 * time.Millisecond,
		BackoffMax:  5 * time.Second,
	}
}

// ConfigError makes an adapter's configuration error (its ErrConfig wrapped).
type ConfigError func(format string, args ...any) error

// Apply applies opts to cfg with apply, refusing a nil option.
func Apply[O comparable, C any](cfg *C, opts []O, apply func(O, *C), fail ConfigError) error {
	var none O
	for _, o := range opts {
		if o == none {
			return fail("nil option")
		}
		apply(o, cfg)
	}
	return nil
}

// Check checks a constructor's arguments and the shared options, after the
// options were applied. The adapter checks its own options next, then Settings
// the store's scope.
func Check[V, T any](store consumer.Store, decode func(*kgo.Record) (V, error),
	handler func(ctx context.Context, v V, rec *kgo.Record) (T, error), sh Shared, fail ConfigError) error {
	switch {
	case store == nil || typednil.Is(store):
		return fail("nil store: pass a store from idemkit/store/redis, store/postgres, store/dynamodb or store/memory")
	case decode == nil:
		return fail("nil decode function")
	case handler == nil:
		return fail("nil handler")
	case sh.ValueType != nil && sh.ValueType != reflect.TypeFor[V]():
		return fail("WithValueKey takes a %v but the consumer decodes %v", sh.ValueType, reflect.TypeFor[V]())
	case sh.KeyFunc == nil && sh.KeyHeader == "":
		return fail("empty key header: omit WithKeyHeader for %q, or give WithKeyFunc", DefaultKeyHeader)
	case sh.DeadLetter == nil:
		return fail("nil dead-letter topic function: omit WithDeadLetterTopic for <topic>.dlq")
	case sh.BackoffBase <= 0 || sh.BackoffMax < sh.BackoffBase:
		return fail("WithBackoff(%v, %v): give 0 < base <= max", sh.BackoffBase, sh.BackoffMax)
	}
	return nil
}

// Settings returns the settings of a store Check accepted, refusing the default
// scope (two services would share their records), and the logger: the one
// WithLogger gave, or the store's.
func Settings(store consumer.Store, sh Shared, fail ConfigError) (consumer.Settings, *slog.Logger, error) {
	s := store.Settings()
	if err := s.CheckScope(); err != nil {
		return consumer.Settings{}, nil, fail("%w", err)
	}
	log := sh.Logger
	if log == nil {
		log = s.Logger
	}
	return s, log, nil
}

// Plain is New's decode and handler for NewTyped: the record is the value. The
// handler is nil when handler is, for Check to refuse.
func Plain[T any](handler func(ctx context.Context, rec *kgo.Record) (T, error)) (
	func(*kgo.Record) (*kgo.Record, error), func(ctx context.Context, rec *kgo.Record, _ *kgo.Record) (T, error)) {
	if handler == nil {
		return func(rec *kgo.Record) (*kgo.Record, error) { return rec, nil }, nil
	}
	return func(rec *kgo.Record) (*kgo.Record, error) { return rec, nil },
		func(ctx context.Context, rec *kgo.Record, _ *kgo.Record) (T, error) { return handler(ctx, rec) }
}

// RecordKey is WithKeyFunc's fn as a KeyFunc (nil for nil).
func RecordKey(fn func(rec *kgo.Record) (consumer.Key, error)) KeyFunc {
	if fn == nil {
		return nil
	}
	return func(rec *kgo.Record, _ any) (consumer.Key, error) { return fn(rec) }
}

// ValueKey is WithValueKey's fn as a KeyFunc (nil for nil), and the V it expects.
func ValueKey[V any](fn func(v V) (consumer.Key, error)) (KeyFunc, reflect.Type) {
	if fn == nil {
		return nil, reflect.TypeFor[V]()
	}
	return func(_ *kgo.Record, v any) (consumer.Key, error) { return fn(v.(V)) }, reflect.TypeFor[V]()
}
