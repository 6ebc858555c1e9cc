package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/retry"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Errors that send a record to the dead-letter topic before it reaches the handler.
var (
	// ErrUndecodable: the decode function refused the record.
	ErrUndecodable = errors.New("kafka: undecodable record")
	// ErrNoKey: the record's key header or key function gave no usable key.
	ErrNoKey = errors.New("kafka: no usable idempotency key")
)

// prepare decodes rec and finds its key.
func (c *Consumer[V, T]) prepare(rec *kgo.Record) (V, consumer.Key, error) {
	v, err := c.decode(rec)
	if err != nil {
		var key consumer.Key
		if c.cfg.keyFunc == nil { // name the key in the dead letter when the header has one
			key, _ = c.headerKey(rec)
		}
		return v, key, fmt.Errorf("%w: %v", ErrUndecodable, err)
	}
	var key consumer.Key
	switch {
	case c.cfg.keyFunc != nil:
		key, err = c.cfg.keyFunc(rec, v)
	default:
		key, _ = c.headerKey(rec)
	}
	if err == nil {
		err = key.Validate()
	}
	if err != nil {
		return v, key, fmt.Errorf("%w: %v", ErrNoKey, err)
	}
	return v, key, nil
}

// headerKey is the record's key header, or the key of its coordinates when it has
// none; found says whether the header was there.
func (c *Consumer[V, T]) headerKey(rec *kgo.Record) (key consumer.Key, found bool) {
	for _, h := range rec.Headers {
		if h.Key == c.cfg.keyHeader {
			return consumer.Key(h.Value), true
		}
	}
	return consumer.NewKey(coordinatesNS, rec.Topic, strconv.Itoa(int(rec.Partition)), strconv.FormatInt(rec.Offset, 10)), false
}

// processPartition runs one partition's records of a poll in order and returns how
// many of them, from the first, are settled.
func (c *Consumer[V, T]) processPartition(ctx context.Context, recs []*kgo.Record) int {
	i := 0
	for i < len(recs) && ctx.Err() == nil {
		var items []consumer.BatchItem
		var vals []V
		for j := i; j < len(recs); j++ {
			v, key, err := c.prepare(recs[j])
			if err != nil {
				break
			}
			items = append(items, consumer.BatchItem{Key: key, Payload: recs[j].Value})
			vals = append(vals, v)
		}
		if len(items) == 0 { // recs[i] cannot be run
			_, key, err := c.prepare(recs[i])
			outcome := "UNDECODABLE"
			if errors.Is(err, ErrNoKey) {
				outcome = "NO_KEY"
			}
			if !c.deadLetter(ctx, recs[i], key, 0, outcome, err) {
				return i
			}
			c.onOutcome(recs[i], consumer.Error)
			i++
			continue
		}
		base := i
		res := consumer.ExecuteBatch(ctx, c.store, items,
			func(hctx context.Context, k int, _ consumer.BatchItem) (T, error) {
				return c.handle(hctx, vals[k], recs[base+k])
			},
			consumer.WithStopAfterFailure(true), consumer.WithPerMessageCompletion(c.cfg.perMessage))
		for k, r := range res {
			if errors.Is(r.Err, consumer.ErrNotRun) && k > 0 {
				break // run again from here, after the failed record settled
			}
			if !c.settle(ctx, recs[base+k], items[k], vals[k], r) {
				return i
			}
			i++
		}
	}
	return i
}

// settle drives one record's result to its end: settled (true), or left for the
// next poll (false).
func (c *Consumer[V, T]) settle(ctx context.Context, rec *kgo.Record, item consumer.BatchItem, v V, r consumer.Result[T]) bool {
	var retries int
	var waitingSince, unreachableSince time.Time
	for {
		var pause time.Duration
		switch r.Action() {
		case consumer.Settle:
			c.onOutcome(rec, r.Outcome)
			return true
		case consumer.DeadLetter:
			if !c.deadLetter(ctx, rec, item.Key, r.Attempt, r.Outcome.String(), r.Err) {
				return false
			}
			c.onOutcome(rec, r.Outcome)
			return true
		case consumer.Wait:
			if waitingSince.IsZero() {
				waitingSince = time.Now()
			}
			left := c.cfg.inProgressWait - time.Since(waitingSince)
			if left <= 0 {
				c.log.Info("kafka: record still in progress elsewhere; left for the next poll",
					"topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "key", string(item.Key))
				return false
			}
			pause = max(min(r.LeaseLeft+10*time.Millisecond, left, 250*time.Millisecond), 5*time.Millisecond)
		case consumer.Retry:
			if errors.Is(r.Err, consumer.ErrStoreUnavailable) || errors.Is(r.Err, consumer.ErrNotRun) {
				if unreachableSince.IsZero() {
					unreachableSince = time.Now()
				}
				if time.Since(unreachableSince) >= c.cfg.retryLater {
					c.log.Warn("kafka: store unreachable; record left for the next poll",
						"topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "err", r.Err)
					return false
				}
			}
			retries++
			c.onRetry(rec, retries, r.Err)
			pause = retry.Backoff(c.cfg.backoffBase, c.cfg.backoffMax, retries)
		}
		if !retry.Sleep(ctx, pause) {
			return false
		}
		r = consumer.ExecuteIdempotently(ctx, c.store, item.Key, item.Payload, func(hctx context.Context) (T, error) {
			return c.handle(hctx, v, rec)
		})
	}
}

// deadLetter produces a copy of rec to its dead-letter topic and waits for the
// broker's acknowledgement, trying up to the configured number of times.
func (c *Consumer[V, T]) deadLetter(ctx context.Context, rec *kgo.Record, key consumer.Key, attempts int, outcome string, reason error) bool {
	topic := c.cfg.deadLetter(rec.Topic)
	text := "unknown"
	if reason != nil {
		text = reason.Error()
	}
	for try := 1; try <= c.cfg.dlqTries; try++ {
		out := &kgo.Record{Topic: topic, Key: rec.Key, Value: rec.Value, Headers: append(append([]kgo.RecordHeader(nil), rec.Headers...),
			kgo.RecordHeader{Key: HeaderOriginalTopic, Value: []byte(rec.Topic)},
			kgo.RecordHeader{Key: HeaderOriginalPartition, Value: []byte(strconv.Itoa(int(rec.Partition)))},
			kgo.RecordHeader{Key: HeaderOriginalOffset, Value: []byte(strconv.FormatInt(rec.Offset, 10))},
			kgo.RecordHeader{Key: HeaderKey, Value: []byte(key)},
			kgo.RecordHeader{Key: HeaderAttempts, Value: []byte(strconv.Itoa(attempts))},
			kgo.RecordHeader{Key: HeaderOutcome, Value: []byte(outcome)},
			kgo.RecordHeader{Key: HeaderError, Value: []byte(text)},
		)}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := c.cl.ProduceSync(pctx, out).FirstErr()
		cancel()
		if err == nil {
			c.log.Warn("kafka: record dead-lettered", "topic", rec.Topic, "partition", rec.Partition,
				"offset", rec.Offset, "dlq", topic, "outcome", outcome, "reason", text)
			c.onDeadLetter(rec, topic, reason)
			return true
		}
		c.log.Warn("kafka: dead-letter produce failed", "dlq", topic, "try", try, "err", err)
		if try < c.cfg.dlqTries && !retry.Sleep(ctx, retry.Backoff(c.cfg.backoffBase, c.cfg.backoffMax, try)) {
			return false
		}
	}
	return false
}
