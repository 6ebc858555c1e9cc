package kafkashare

import (
	"context"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/kafkadl"
	"github.com/idemkit/idemkit/internal/retry"
	"github.com/twmb/franz-go/pkg/kgo"
)

// deadLetter produces h's dead-letter copy and, once the broker acknowledged it,
// accepts h. A copy the broker refuses for its size is replaced by a body-less
// one; other failures are tried again with backoff while h's lock lasts (it is
// renewed meanwhile), then h is released: its next delivery is dead-lettered
// again. With WithBrokerDeadLetter, h is rejected instead.
func (p *poll[V, T]) deadLetter(h *held[V], kind string, attempts int, o consumer.Outcome, reason error) {
	c := p.c
	if c.cfg.brokerDLQ {
		p.terminal(h, kgo.AckReject, "broker-dead-letter")
		return
	}
	topic := c.cfg.DeadLetter(h.rec.Topic)
	text := "unknown"
	if reason != nil {
		text = consumer.CapText(reason.Error(), kafkadl.MaxErrorHeader)
	}
	for try := 1; ; try++ {
		bodyLess := false
		err := p.produce(h, c.deadLetterCopy(h, topic, kind, attempts, o, text, false))
		if kafkadl.TooLarge(err) {
			c.log.Warn("kafkashare: the dead-letter copy is too large for the broker; a body-less copy goes instead",
				"topic", h.rec.Topic, "partition", h.rec.Partition, "offset", h.rec.Offset, "dlq", topic, "err", err)
			bodyLess = true
			err = p.produce(h, c.deadLetterCopy(h, topic, kind, attempts, o, consumer.CapText(text, 1<<10), true))
		}
		if err == nil {
			c.log.Warn("kafkashare: record dead-lettered", "topic", h.rec.Topic, "partition", h.rec.Partition,
				"offset", h.rec.Offset, "dlq", topic, "kind", kind, "body_less", bodyLess, "reason", consumer.CapText(text, 256))
			c.reportDeadLetter(consumer.DeadLetterEvent{Key: h.key, Origin: origin(h.rec), Kind: kind, Err: reason,
				Destination: topic, BodyLess: bodyLess})
			p.terminal(h, kgo.AckAccept, "dead-lettered")
			return
		}
		c.log.Warn("kafkashare: dead-letter produce failed; trying again while the record's lock lasts",
			"dlq", topic, "try", try, "err", err)
		wait := retry.Backoff(c.cfg.BackoffBase, c.cfg.BackoffMax, try)
		if p.stopping.Load() || time.Now().Add(wait).UnixNano() >= h.deadline.Load()-int64(p.margin) {
			p.terminal(h, kgo.AckRelease, "lock-expiring")
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-c.stop:
			t.Stop()
		}
	}
}

// produce writes rec, bounded by the call timeout and by h's lock.
func (p *poll[V, T]) produce(h *held[V], rec *kgo.Record) error {
	ctx, cancel := context.WithDeadline(p.base, minTime(time.Now().Add(p.c.s.CallTimeout+5*time.Second),
		time.Unix(0, h.deadline.Load()-int64(p.margin))))
	defer cancel()
	return p.cl.ProduceSync(ctx, rec).FirstErr()
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// deadLetterCopy is h's copy for topic, with the classic adapter's headers and the
// trace context of h's last handler run in this delivery (see traceContext).
func (c *Consumer[V, T]) deadLetterCopy(h *held[V], topic, kind string, attempts int, o consumer.Outcome, text string, bodyLess bool) *kgo.Record {
	out := kafkadl.Record(h.rec, kafkadl.Copy{Topic: topic, Key: string(h.key), Attempts: attempts,
		Outcome: o.String(), Kind: kind, Text: text, BodyLess: bodyLess})
	c.injectTrace(traceContext(h), func(k, v string) { kafkadl.SetHeader(out, k, v) })
	return out
}

// traceContext is the context the tracers write h's dead letter's trace context
// from: its handler's in this delivery's last run, so that the copy carries the
// span of the execution that failed; or, when no handler ran in this delivery
// (undecodable, no key, a duplicate of a key that failed), one holding only the
// record, so that the copy carries the record's own trace context. That run has
// returned: the copy is made once the engine settled it.
func traceContext[V any](h *held[V]) context.Context {
	if h.hctx != nil {
		return h.hctx
	}
	return &submission[V]{Context: context.Background(), h: h}
}
