package amqp

import (
	"fmt"
	"reflect"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Ordering says which deliveries may run at the same time. Build one with
// ByKeyHeader, ByKeyFunc or ByValueKey, or use Unordered (the default), and pass
// it to WithOrdering.
//
// Ordered by a key (an account, an order), the deliveries of one ordering key run
// one at a time, in the order the worker received them, and deliveries of
// different keys at once: a delivery that waits, retries or stalls holds back only
// the later deliveries of its key. A delivery whose ordering key is empty is
// ordered by its idempotency key instead, as the Kafka adapter orders a record
// without a record key. The ordering key is not the idempotency key: many
// operations (charge, ship, refund) of one account share the account's ordering
// key and each has an idempotency key of its own.
type Ordering struct {
	by     orderBy
	header string
	fn     func(d amqp091.Delivery, v any) (string, error)
	vtype  reflect.Type // the V a ByValueKey expects
	bad    string       // why the ordering is unusable, for NewWorker's error
}

type orderBy int

const (
	unordered orderBy = iota
	byHeader
	byFunc
)

// Unordered runs deliveries as they come, up to WithConcurrency at once (two
// deliveries with the same idempotency key still never run at once). The default.
var Unordered = Ordering{}

// ByKeyHeader orders deliveries by the value of the named header (a string, or
// bytes taken as a string); a delivery without it is ordered by its idempotency
// key. An empty name makes NewWorker return an error matching ErrConfig.
func ByKeyHeader(name string) Ordering {
	o := Ordering{by: byHeader, header: name}
	if name == "" {
		o.bad = "ByKeyHeader(\"\"): name the header that carries the ordering key"
	}
	return o
}

// ByKeyFunc orders deliveries by the key fn returns. A delivery for which fn
// returns an error is dead-lettered (kind NO_KEY): running it out of its order is
// what ordering forbids. A nil fn makes NewWorker return an error matching ErrConfig.
func ByKeyFunc(fn func(d amqp091.Delivery) (string, error)) Ordering {
	o := Ordering{by: byFunc}
	if fn == nil {
		o.bad = "ByKeyFunc(nil): give a function that returns the ordering key"
		return o
	}
	o.fn = func(d amqp091.Delivery, _ any) (string, error) { return fn(d) }
	return o
}

// ByValueKey orders the deliveries of a NewTypedWorker[V] by the key fn returns
// for the decoded body; an error dead-letters the delivery (kind NO_KEY). A nil fn,
// or a V other than the worker's, makes NewWorker return an error matching
// ErrConfig.
func ByValueKey[V any](fn func(v V) (string, error)) Ordering {
	o := Ordering{by: byFunc, vtype: reflect.TypeFor[V]()}
	if fn == nil {
		o.bad = "ByValueKey(nil): give a function that returns the ordering key"
		return o
	}
	o.fn = func(_ amqp091.Delivery, v any) (string, error) { return fn(v.(V)) }
	return o
}

// String names the ordering as the Kafka adapter names its own: "unordered", or
// "key" with where the key comes from.
func (o Ordering) String() string {
	switch o.by {
	case byHeader:
		return fmt.Sprintf("key (header %q)", o.header)
	case byFunc:
		if o.vtype != nil {
			return fmt.Sprintf("key (of the decoded %v)", o.vtype)
		}
		return "key (function)"
	}
	return "unordered"
}

// ordered reports whether deliveries run in lanes.
func (o Ordering) ordered() bool { return o.by != unordered }

// validate checks o for a worker that decodes v.
func (o Ordering) validate(v reflect.Type) error {
	switch {
	case o.bad != "":
		return configError("WithOrdering: %s", o.bad)
	case o.vtype != nil && o.vtype != v:
		return configError("WithOrdering(ByValueKey) takes a %v but the worker decodes %v", o.vtype, v)
	}
	return nil
}

// lane names d's lane: its ordering key as it is, else "\x00" and its
// idempotency key. An ordering key that starts with "\x00" may share a lane with
// an idempotency key: two lanes merged only order more, never less.
func (o Ordering) lane(d *amqp091.Delivery, v any, key string) (string, error) {
	var k string
	switch o.by {
	case byHeader:
		switch h := d.Headers[o.header].(type) {
		case string:
			k = h
		case []byte:
			k = string(h)
		}
	case byFunc:
		var err error
		if k, err = o.fn(*d, v); err != nil {
			return "", fmt.Errorf("%w: ordering key: %v", ErrNoKey, err)
		}
	}
	if k == "" {
		return "\x00" + key, nil
	}
	return k, nil
}
