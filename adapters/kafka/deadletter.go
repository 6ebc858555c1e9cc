package kafka

import (
	"context"
	"errors"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/kafkadl"
	"github.com/idemkit/idemkit/internal/retry"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// deadLetter produces a copy of r to its dead-letter topic and, once the broker
// acknowledged it, finishes r as settled. A copy the broker refuses for its size is
// replaced by a body-less one (coordinates, key, kind and reason); other failures
// are tried again with backoff for as long as the partition is this member's. Only
// r's key (and its partition's commit point) waits meanwhile.
func (c *Consumer[V, T]) deadLetter(r *record[V], kind string, attempts int, o consumer.Outcome, reason error) {
	topic := c.cfg.DeadLetter(r.rec.Topic)
	text := "unknown"
	if reason != nil {
		text = consumer.CapText(reason.Error(), MaxErrorHeader)
	}
	for try := 1; ; try++ {
		bodyLess := false
		err := c.produce(c.deadLetterCopy(r, topic, kind, attempts, o, text, false))
		if kafkadl.TooLarge(err) {
			c.log.Warn("kafka: the dead-letter copy is too large for the broker; a body-less copy goes instead",
				"topic", r.rec.Topic, "partition", r.rec.Partition, "offset", r.rec.Offset, "dlq", topic, "err", err)
			bodyLess = true
			err = c.produce(c.deadLetterCopy(r, topic, kind, attempts, o, consumer.CapText(text, 1<<10), true))
		}
		if err == nil {
			c.log.Warn("kafka: record dead-lettered", "topic", r.rec.Topic, "partition", r.rec.Partition,
				"offset", r.rec.Offset, "dlq", topic, "kind", kind, "body_less", bodyLess, "reason", consumer.CapText(text, 256))
			c.reportDeadLetter(consumer.DeadLetterEvent{Key: r.key, Origin: origin(r.rec), Kind: kind, Err: reason,
				Destination: topic, BodyLess: bodyLess})
			c.finish(r, true)
			return
		}
		if errors.Is(err, kerr.UnknownTopicOrPartition) { // checked at the start, so deleted since
			c.log.Error("kafka: the dead-letter topic does not exist; the partition waits at this record until it is created",
				"dlq", topic, "topic", r.rec.Topic, "partition", r.rec.Partition, "offset", r.rec.Offset, "try", try)
		} else {
			c.log.Warn("kafka: dead-letter produce failed; trying again", "dlq", topic, "try", try, "err", err)
		}
		t := time.NewTimer(retry.Backoff(c.cfg.BackoffBase, c.cfg.BackoffMax, try))
		select {
		case <-t.C:
		case <-c.stop:
			t.Stop()
			c.finish(r, false)
			return
		}
		if c.isGone(r.p) {
			c.finish(r, false)
			return
		}
	}
}

func (c *Consumer[V, T]) produce(rec *kgo.Record) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.cl.ProduceSync(ctx, rec).FirstErr()
}

// deadLetterCopy is r's copy for topic: its key, value and headers (none of them
// when bodyLess), plus the idemkit headers (the same as the share-group adapter's),
// with the trace context of r's last handler run (see traceContext).
func (c *Consumer[V, T]) deadLetterCopy(r *record[V], topic, kind string, attempts int, o consumer.Outcome, text string, bodyLess bool) *kgo.Record {
	out := kafkadl.Record(r.rec, kafkadl.Copy{Topic: topic, Key: string(r.key), Attempts: attempts,
		Outcome: o.String(), Kind: kind, Text: text, BodyLess: bodyLess})
	c.injectTrace(traceContext(r), func(k, v string) { kafkadl.SetHeader(out, k, v) })
	return out
}

// traceContext is the context the tracers write r's dead letter's trace context
// from: its handler's in its last run, so that the copy carries the span of the
// execution that failed; or, when no handler ran for it (undecodable, no key, a
// duplicate of a key that failed), one holding only r's message, so that the copy
// carries the record's own trace context. Its last run has returned: its
// dead letter is produced once the engine settled it.
func traceContext[V any](r *record[V]) context.Context {
	if r.hctx != nil {
		return r.hctx
	}
	return messageContext(context.Background(), r.rec)
}
