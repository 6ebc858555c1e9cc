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

// errPartitionGone: a record's partition went to another member before its
// handler started.
var errPartitionGone = errors.New("kafka: the record's partition was revoked")

// record is one record between the poll that took it and its end: settled
// (committable) or dropped (its partition went to another member).
type record[V any] struct {
	rec     *kgo.Record
	p       *partition
	key     consumer.Key
	v       V
	bad     error  // why it cannot run (ErrUndecodable, ErrNoKey): it is dead-lettered
	lane    string // records of one lane run one at a time, in the order taken
	retries int    // handler failures retried
	outages int    // store outages retried (not attempts)
}

// take accepts a partition's fetched records: they are counted open, their
// partition is paused at its in-flight bound, and each is queued behind its lane.
func (c *Consumer[V, T]) take(fp kgo.FetchTopicPartition) {
	c.mu.Lock()
	p := c.partitionOf(fp.Topic, fp.Partition)
	if p.gone {
		c.mu.Unlock()
		return
	}
	p.hw = fp.HighWatermark
	recs := make([]*kgo.Record, 0, len(fp.Records))
	for _, rec := range fp.Records {
		if err := p.track.Add(rec.Offset); err != nil {
			c.log.Warn("kafka: record fetched again; skipped", "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset)
			continue
		}
		recs = append(recs, rec)
	}
	p.open += len(recs)
	c.open += len(recs)
	pause := !p.paused && p.open >= c.cfg.partitionLimit
	if pause {
		p.paused = true
	}
	c.mu.Unlock()
	if pause {
		c.cl.PauseFetchPartitions(map[string][]int32{p.topic: {p.part}})
	}
	for _, rec := range recs {
		r := c.prepare(p, rec)
		if c.lanes.Push(r.lane, r) {
			c.enqueue(r)
		}
	}
}

// prepare decodes rec, finds its key and names its lane.
func (c *Consumer[V, T]) prepare(p *partition, rec *kgo.Record) *record[V] {
	r := &record[V]{rec: rec, p: p}
	v, err := c.decode(rec)
	switch {
	case err != nil:
		if c.cfg.keyFunc == nil { // name the key in the dead letter when the header has one
			r.key = c.headerKey(rec)
		}
		r.bad = fmt.Errorf("%w: %v", ErrUndecodable, err)
	case c.cfg.keyFunc != nil:
		r.v = v
		r.key, err = c.cfg.keyFunc(rec, v)
	default:
		r.v = v
		r.key = c.headerKey(rec)
	}
	if r.bad == nil && err == nil {
		err = r.key.Validate()
	}
	if r.bad == nil && err != nil {
		r.bad = fmt.Errorf("%w: %v", ErrNoKey, err)
	}
	coords := rec.Topic + "/" + strconv.Itoa(int(rec.Partition))
	switch {
	case c.cfg.ordering == ByPartition:
		r.lane = "p" + coords
	case c.cfg.ordering == ByKey && len(rec.Key) > 0:
		r.lane = "k" + string(rec.Key)
	case c.cfg.ordering == ByKey && r.bad == nil:
		r.lane = "i" + string(r.key)
	default: // a lane of its own
		r.lane = "r" + coords + "@" + strconv.FormatInt(rec.Offset, 10)
	}
	return r
}

// headerKey is the record's key header, or, without one, a key derived from the
// consumer group and the record's coordinates (two groups on one topic keep
// records of their own).
func (c *Consumer[V, T]) headerKey(rec *kgo.Record) consumer.Key {
	for _, h := range rec.Headers {
		if h.Key == c.cfg.keyHeader {
			return consumer.Key(h.Value)
		}
	}
	return consumer.NewKey(coordinatesNS, c.group, rec.Topic, strconv.Itoa(int(rec.Partition)), strconv.FormatInt(rec.Offset, 10))
}

// enqueue hands r, whose lane turn has come, to the starter.
func (c *Consumer[V, T]) enqueue(r *record[V]) {
	c.mu.Lock()
	c.queue = append(c.queue, r)
	c.mu.Unlock()
	select {
	case c.startq <- struct{}{}:
	default:
	}
}

// starter submits queued records to the engine in order; a full engine window
// holds it (and through waitRoom, the poll loop) back.
func (c *Consumer[V, T]) starter() {
	for {
		c.mu.Lock()
		q := c.queue
		c.queue = nil
		c.mu.Unlock()
		for _, r := range q {
			c.start(r)
		}
		if len(q) > 0 {
			continue
		}
		select {
		case <-c.startq:
		case <-c.stop:
			return
		}
	}
}

// start runs r: a record that cannot run is dead-lettered, one of a partition
// gone elsewhere is dropped, the others go to the engine.
func (c *Consumer[V, T]) start(r *record[V]) {
	if c.isGone(r.p) {
		c.finish(r, false)
		return
	}
	if r.bad != nil {
		kind := "UNDECODABLE"
		if errors.Is(r.bad, ErrNoKey) {
			kind = "NO_KEY"
		}
		go c.deadLetter(r, kind, 0, consumer.Error, r.bad)
		return
	}
	ctx := messageContext(r.p.ctx, r.rec)
	err := c.pipe.Submit(ctx, consumer.PipelineItem[T]{
		Key: r.key, Payload: r.rec.Value,
		Run: func(hctx context.Context) (T, error) {
			if c.isGone(r.p) { // revoked while it waited: its next owner runs it
				var zero T
				return zero, consumer.Abandon(errPartitionGone)
			}
			return c.handle(hctx, r.v, r.rec)
		},
		Done: func(res consumer.Result[T]) { c.done(r, res) },
	})
	if err != nil { // the partition went away, or the consumer stops
		c.finish(r, false)
	}
}

func (c *Consumer[V, T]) isGone(p *partition) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return p.gone
}

// done maps a result to its action (consumer.ActionFor). It runs on the engine's
// goroutines: anything that waits goes to a goroutine or a timer of its own.
func (c *Consumer[V, T]) done(r *record[V], res consumer.Result[T]) {
	var pe *consumer.PanicError
	if errors.As(res.Err, &pe) {
		c.log.Error("kafka: handler panicked", "topic", r.rec.Topic, "partition", r.rec.Partition,
			"offset", r.rec.Offset, "panic", fmt.Sprint(pe.Value), "stack", string(pe.Stack))
	}
	switch res.Action() {
	case consumer.Ack:
		c.finish(r, true)
	case consumer.DeadLetter:
		go c.deadLetter(r, consumer.DeadLetterKind(res.Err), res.Attempt, res.Outcome, res.Err)
	case consumer.Wait: // another owner's live claim: look again when it may have ended
		c.later(r, max(min(res.LeaseLeft+10*time.Millisecond, 250*time.Millisecond), 5*time.Millisecond))
	case consumer.Retry:
		var n int
		if errors.Is(res.Err, consumer.ErrStoreUnavailable) || errors.Is(res.Err, consumer.ErrNotRun) {
			r.outages++ // the handler did not run
			n = r.outages
		} else {
			r.retries++
			n = r.retries
			delay := retry.Backoff(c.cfg.backoffBase, c.cfg.backoffMax, n)
			c.reportRetry(consumer.RetryEvent{Key: r.key, Origin: origin(r.rec), Attempt: res.Attempt, Delay: delay,
				Kind: consumer.ErrorKind(res.Err), Err: res.Err})
			c.later(r, delay)
			return
		}
		c.later(r, retry.Backoff(c.cfg.backoffBase, c.cfg.backoffMax, n))
	}
}

// later starts r again after d; it keeps its lane (later records of its key, or
// of its partition in ByPartition, wait) and its partition's commit point.
func (c *Consumer[V, T]) later(r *record[V], d time.Duration) {
	time.AfterFunc(d, func() {
		select {
		case <-c.stop:
			c.finish(r, false)
			return
		default:
		}
		c.start(r)
	})
}

// finish ends r: its lane's next record may start, and, when settled, its offset
// counts toward its partition's commit.
func (c *Consumer[V, T]) finish(r *record[V], settled bool) {
	for {
		c.release(r, settled)
		next, ok := c.lanes.Done(r.lane)
		if !ok {
			return
		}
		if !c.isGone(next.p) {
			c.enqueue(next)
			return
		}
		r, settled = next, false // dropped at once, not behind the starter
	}
}

// release counts r finished: settled, its offset counts toward its partition's
// commit. That holds after the partition is revoked too: the revocation's drain
// commits what settled during it. Only revoked and commit decide which gone
// partitions are committed (the revoked ones, once, before the rebalance goes
// on; never a lost one).
func (c *Consumer[V, T]) release(r *record[V], settled bool) {
	p := r.p
	c.mu.Lock()
	if settled {
		if through, moved := p.track.Settle(r.rec.Offset); moved {
			p.next = through + 1
		}
	}
	p.open--
	c.open--
	resume := p.paused && !p.gone && p.open <= c.cfg.partitionLimit/2
	if resume {
		p.paused = false
	}
	if c.roomWait != nil && c.open < c.roomCap() {
		close(c.roomWait)
		c.roomWait = nil
	}
	c.mu.Unlock()
	if resume {
		c.cl.ResumeFetchPartitions(map[string][]int32{p.topic: {p.part}})
	}
}

// headers reads kgo headers as a consumer.Carrier.
type headers []kgo.RecordHeader

func (h headers) Get(key string) string {
	for _, x := range h {
		if x.Key == key {
			return string(x.Value)
		}
	}
	return ""
}

func (h headers) Keys() []string {
	out := make([]string, len(h))
	for i, x := range h {
		out[i] = x.Key
	}
	return out
}
