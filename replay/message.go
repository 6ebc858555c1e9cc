package replay

import (
	"context"
	"time"

	"github.com/idemkit/idemkit/consumer"
)

// Message is one old message to drive through a handler again.
type Message struct {
	// Key is the message's idempotency key, the one the live consumer derived.
	Key consumer.Key
	// Payload is the message as stored, as the handler gets it.
	Payload []byte
	// Partition and Offset place the message in its source: a Kafka record's
	// "topic/partition" and offset, a JSONL file's "" and line number. Offsets grow
	// within a partition; checkpoints are kept per partition.
	Partition string
	Offset    int64
	// Time is when the message was first produced; zero when the source does not know.
	Time time.Time
	// Headers are the message's headers (Kafka headers, the JSONL "headers" object).
	Headers map[string]string
	// KeyErr says why the source could not find the message's key; such a message is
	// counted INVALID and not run.
	KeyErr error
	// Raw is the source's own form of the message (a *kgo.Record for KafkaSource).
	Raw any
}

// Source yields the messages of a replay in order. Sources that span partitions
// may interleave them, but keep each partition in offset order.
type Source interface {
	// Read returns up to max next messages; (nil, io.EOF) after the last one. A
	// short or empty batch without io.EOF means more may follow.
	Read(ctx context.Context, max int) ([]Message, error)
	// Close releases the source.
	Close() error
}

// HeaderReplayCount is the header that counts how often a message was replayed or
// redriven; the loop guard quarantines a message whose count reached the limit.
const HeaderReplayCount = "idemkit-replay-count"
