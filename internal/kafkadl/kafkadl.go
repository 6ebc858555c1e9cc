// Package kafkadl builds the dead-letter copy of a Kafka record, with the idemkit
// headers, for both Kafka adapters (classic groups in adapters/kafka, share groups
// in adapters/kafkashare): one place decides what a dead letter carries, so a
// reader of a dead-letter topic never needs to know which consumer wrote it.
package kafkadl

import (
	"errors"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Header names of a dead-letter copy. adapters/kafka exports the same names.
const (
	HeaderOriginalTopic     = "idemkit-original-topic"
	HeaderOriginalPartition = "idemkit-original-partition"
	HeaderOriginalOffset    = "idemkit-original-offset"
	HeaderKey               = "idemkit-key"
	HeaderAttempts          = "idemkit-attempts"
	HeaderOutcome           = "idemkit-outcome"
	HeaderError             = "idemkit-error"
	HeaderKind              = "idemkit-kind"
	HeaderBodyLess          = "idemkit-body-less"
)

// MaxErrorHeader is the longest error text a dead-letter copy carries.
const MaxErrorHeader = 4 << 10

// Copy describes the dead-letter copy of one record.
type Copy struct {
	Topic    string // the dead-letter topic
	Key      string // the idempotency key ("" when the record had none)
	Attempts int
	Outcome  string // consumer.Outcome's String
	Kind     string // consumer.DeadLetterKind, UNDECODABLE, NO_KEY...
	Text     string // the reason, already capped
	BodyLess bool   // leave the record's value and headers out
}

// Record is rec's copy as c describes it: rec's key, and its value and headers
// unless c.BodyLess, then the idemkit headers.
func Record(rec *kgo.Record, c Copy) *kgo.Record {
	out := &kgo.Record{Topic: c.Topic, Key: rec.Key}
	n := 8
	if c.BodyLess {
		n++
	} else {
		out.Value = rec.Value
		n += len(rec.Headers)
	}
	out.Headers = make([]kgo.RecordHeader, 0, n)
	if !c.BodyLess {
		out.Headers = append(out.Headers, rec.Headers...)
	}
	out.Headers = append(out.Headers,
		kgo.RecordHeader{Key: HeaderOriginalTopic, Value: []byte(rec.Topic)},
		kgo.RecordHeader{Key: HeaderOriginalPartition, Value: []byte(strconv.Itoa(int(rec.Partition)))},
		kgo.RecordHeader{Key: HeaderOriginalOffset, Value: []byte(strconv.FormatInt(rec.Offset, 10))},
		kgo.RecordHeader{Key: HeaderKey, Value: []byte(c.Key)},
		kgo.RecordHeader{Key: HeaderAttempts, Value: []byte(strconv.Itoa(c.Attempts))},
		kgo.RecordHeader{Key: HeaderOutcome, Value: []byte(c.Outcome)},
		kgo.RecordHeader{Key: HeaderKind, Value: []byte(c.Kind)},
		kgo.RecordHeader{Key: HeaderError, Value: []byte(c.Text)},
	)
	if c.BodyLess {
		out.Headers = append(out.Headers, kgo.RecordHeader{Key: HeaderBodyLess, Value: []byte("true")})
	}
	return out
}

// SetHeader sets key to value on rec, replacing an existing header of that name:
// the shape a tracer's Inject wants. A key that names one of the copy's idemkit
// headers is ignored: what a tracer writes never changes what a dead letter says
// about itself.
func SetHeader(rec *kgo.Record, key, value string) {
	if own(key) {
		return
	}
	for i, h := range rec.Headers {
		if h.Key == key {
			rec.Headers[i].Value = []byte(value)
			return
		}
	}
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: key, Value: []byte(value)})
}

// Headers reads kgo headers as a consumer.Carrier.
type Headers []kgo.RecordHeader

// Get is the value of the first header named key, or "".
func (h Headers) Get(key string) string {
	for i := range h {
		if h[i].Key == key {
			return string(h[i].Value)
		}
	}
	return ""
}

// Keys are the header names.
func (h Headers) Keys() []string {
	out := make([]string, len(h))
	for i := range h {
		out[i] = h[i].Key
	}
	return out
}

// TooLarge reports whether the broker (or the client, before sending) refused a
// record for its size: the copy is then sent again without its body.
func TooLarge(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)
}

// own reports whether key is one of the idemkit headers a copy carries.
func own(key string) bool {
	switch key {
	case HeaderOriginalTopic, HeaderOriginalPartition, HeaderOriginalOffset, HeaderKey,
		HeaderAttempts, HeaderOutcome, HeaderError, HeaderKind, HeaderBodyLess:
		return true
	}
	return false
}
