package kafka

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"strconv"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/kafkaconf"
	"github.com/idemkit/idemkit/internal/observe"
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
// (committable) or dropped (its partition went to another member). The records of
// one fetch are allocated together (as kgo allocates their kgo.Records), so that
// taking a record costs no allocation of its own.
//
// A record is also the context it is submitted with, which its handler's context
// derives from: its partition's (cancelled when the partition is revoked or lost),
// answering the record itself for the consumer's one handler function
// (Consumer.runRecord), and given back as itself to its one DoneContext function
// (Consumer.doneRecord), so that no closure is made per record for either, and
// answering its message (headers, origin) for the engine's events and tracers, so
// that no context.WithValue is.
type record[V any] struct {
	context.Context // its partition's
	rec             *kgo.Record
	p               *partition
	key             consumer.Key
	keyed           bool // key is the record's key header
	v               V
	bad             error           // why it cannot run (ErrUndecodable, ErrNoKey): it is dead-lettered
	ordered         bool            // it has a lane: records of one lane run one at a time, in the order taken
	lane            uint64          // its lane's name: see laneOf
	laneNext        *record[V]      // the record after it waiting in its lane (laneTable)
	msg             observe.Message // its headers and origin, for the engine's events and tracers
	retries         int             // handler failures retried
	outages         int             // store outages retried (not attempts)
	hctx            context.Context // its handler's context in its last run (the span its dead letter carries); nil before one
}

// recordKey is the context key under which a record's context answers itself.
type recordKey struct{}

// messageKey is the context key of the message the engine reports on its events
// (observe.WithMessage's): a record's context answers its msg for it.
var messageKey = observe.MessageKey()

// Value answers the record for recordKey, its message for messageKey, and asks
// its partition's context for anything else.
func (r *record[V]) Value(key any) any {
	switch {
	case key == recordKey{}:
		return r
	case key == messageKey:
		return &r.msg
	}
	return r.Context.Value(key)
}

// take accepts a partition's fetched records: they are counted open, their
// partition is paused at its in-flight bound, and each is queued behind its lane.
// Only the poll loop calls it.
func (c *Consumer[V, T]) take(fp kgo.FetchTopicPartition) {
	c.mu.Lock()
	p := c.partitionOf(fp.Topic, fp.Partition)
	if p.gone.Load() {
		c.mu.Unlock()
		return
	}
	p.hw = fp.HighWatermark
	recs := c.fetched[:0]
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
	rs := make([]record[V], len(recs))
	for i, rec := range recs {
		rs[i].rec, rs[i].p, rs[i].Context = rec, p, p.ctx
	}
	if c.cfg.KeyFunc == nil {
		kafkaconf.HeaderKeys(recs, c.cfg.KeyHeader, func(i int, k consumer.Key) { rs[i].key, rs[i].keyed = k, true })
	}
	clear(recs) // keep no record alive through the buffer
	c.fetched = recs[:0]
	for i := range rs {
		c.prepare(&rs[i])
	}
	queued := 0
	c.mu.Lock()
	for i := range rs {
		if r := &rs[i]; !r.ordered || c.lanes.push(r.lane, r) {
			c.queue = append(c.queue, r)
			queued++
		}
	}
	c.mu.Unlock()
	if queued > 0 {
		c.wakeStarter()
	}
}

// prepare decodes r's record, finds its key (unless its key header named it) and names
// its lane.
func (c *Consumer[V, T]) prepare(r *record[V]) {
	rec := r.rec
	if c.cfg.KeyFunc == nil && !r.keyed { // also names the key in an undecodable record's dead letter
		r.key = c.coordinatesKey(rec)
	}
	v, err := c.decode(rec)
	switch {
	case err != nil:
		r.bad = fmt.Errorf("%w: %v", ErrUndecodable, err)
	case c.cfg.KeyFunc != nil:
		r.v = v
		r.key, err = c.cfg.KeyFunc(rec, v)
	default:
		r.v = v
	}
	if r.bad == nil && err == nil {
		err = r.key.Validate()
	}
	if r.bad == nil && err != nil {
		r.bad = fmt.Errorf("%w: %v", ErrNoKey, err)
	}
	r.ordered, r.lane = c.laneOf(r)
	r.msg = observe.Message{Headers: (*recordHeaders)(rec), Origin: observe.Origin(origin(rec))}
}

// coordinatesKey is the key of a record without a key header: derived from the
// consumer group and the record's coordinates.
func (c *Consumer[V, T]) coordinatesKey(rec *kgo.Record) consumer.Key {
	return consumer.NewKey(coordinatesNS, c.group, rec.Topic, strconv.Itoa(int(rec.Partition)), strconv.FormatInt(rec.Offset, 10))
}

// laneOf names r's lane, if it has one. Lanes are named by a hash (maphash,
// seeded per consumer): of the Kafka record key, or without one of the
// idempotency key, in ByKey; of the topic and partition in ByPartition (kept on
// the partition). Two keys whose hashes collide share a lane, which runs them one
// after the other and breaks nothing.
func (c *Consumer[V, T]) laneOf(r *record[V]) (ordered bool, lane uint64) {
	switch {
	case c.cfg.ordering == ByPartition:
		return true, r.p.lane
	case c.cfg.ordering == ByKey && len(r.rec.Key) > 0:
		return true, maphash.Bytes(c.seed, r.rec.Key)
	case c.cfg.ordering == ByKey && r.bad == nil:
		return true, maphash.String(c.seed, string(r.key))
	}
	return false, 0 // a lane of its own
}

// wakeStarter tells the starter that records were queued.
func (c *Consumer[V, T]) wakeStarter() {
	select {
	case c.startq <- struct{}{}:
	default:
	}
}

// starter submits queued records to the engine in order; a full engine window
// holds it (and through waitRoom, the poll loop) back. It takes the queue's
// records in one swap and gives the emptied slice back for the next ones.
func (c *Consumer[V, T]) starter() {
	var spare []*record[V]
	for {
		c.mu.Lock()
		q := c.queue
		c.queue = spare
		c.mu.Unlock()
		for _, r := range q {
			c.start(r)
		}
		clear(q)
		spare = q[:0]
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
	err := c.pipe.Submit(r, consumer.PipelineItem[T]{ // r answers its msg (see record.Value)
		Key: r.key, Payload: r.rec.Value,
		Run:         c.run,
		DoneContext: c.settled,
	})
	if err != nil { // the partition went away, or the consumer stops
		c.finish(r, false)
	}
}

// runRecord is the handler of every record: the record is found in hctx (see
// record). c.run holds it as one function value for every record.
func (c *Consumer[V, T]) runRecord(hctx context.Context) (T, error) {
	r, ok := hctx.Value(recordKey{}).(*record[V])
	if !ok || c.isGone(r.p) { // revoked while it waited: its next owner runs it
		var zero T
		return zero, consumer.Abandon(errPartitionGone)
	}
	r.hctx = hctx // read once the engine settled this run (Done), or by its next run
	return c.handle(hctx, r.v, r.rec)
}

func (c *Consumer[V, T]) isGone(p *partition) bool { return p.gone.Load() }

// doneRecord is the DoneContext of every record: ctx is the record it was
// submitted with. c.settled holds it as one function value for every record.
func (c *Consumer[V, T]) doneRecord(ctx context.Context, res consumer.Result[T]) {
	c.done(ctx.(*record[V]), res)
}

// done maps a result to its action (consumer.ActionFor). It runs on the engine's
// goroutines: anything that waits goes to a goroutine or a timer of its own.
func (c *Consumer[V, T]) done(r *record[V], res consumer.Result[T]) {
	if res.Err != nil {
		c.logPanic(r, res.Err)
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
			delay := retry.Backoff(c.cfg.BackoffBase, c.cfg.BackoffMax, n)
			c.reportRetry(consumer.RetryEvent{Key: r.key, Origin: origin(r.rec), Attempt: res.Attempt, Delay: delay,
				Kind: consumer.ErrorKind(res.Err), Err: res.Err})
			c.later(r, delay)
			return
		}
		c.later(r, retry.Backoff(c.cfg.BackoffBase, c.cfg.BackoffMax, n))
	}
}

// logPanic logs the panic err carries, if any, with its stack.
func (c *Consumer[V, T]) logPanic(r *record[V], err error) {
	var pe *consumer.PanicError
	if errors.As(err, &pe) {
		c.log.Error("kafka: handler panicked", "topic", r.rec.Topic, "partition", r.rec.Partition,
			"offset", r.rec.Offset, "panic", fmt.Sprint(pe.Value), "stack", string(pe.Stack))
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
// counts toward its partition's commit. One lock covers both.
func (c *Consumer[V, T]) finish(r *record[V], settled bool) {
	var resume []*partition
	queued := false
	c.mu.Lock()
	for {
		if c.release(r, settled) {
			resume = append(resume, r.p)
		}
		if !r.ordered {
			break
		}
		next, ok := c.lanes.done(r.lane)
		if !ok {
			break
		}
		if !next.p.gone.Load() {
			c.queue = append(c.queue, next)
			queued = true
			break
		}
		r, settled = next, false // dropped at once, not behind the starter
	}
	if c.roomWait != nil && c.open < c.roomCap() {
		close(c.roomWait)
		c.roomWait = nil
	}
	c.mu.Unlock()
	for _, p := range resume {
		c.cl.ResumeFetchPartitions(map[string][]int32{p.topic: {p.part}})
	}
	if queued {
		c.wakeStarter()
	}
}

// release counts r finished, under c.mu: settled, its offset counts toward its
// partition's commit. That holds after the partition is revoked too: the
// revocation's drain commits what settled during it. Only revoked and commit
// decide which gone partitions are committed (the revoked ones, once, before the
// rebalance goes on; never a lost one). It reports whether r's partition is to be
// resumed.
func (c *Consumer[V, T]) release(r *record[V], settled bool) (resume bool) {
	p := r.p
	// r is done: what it keeps of its runs goes. A settled handler context may
	// outlive its record (a handler may keep it, and the engine allocates them in
	// slabs), and through r it keeps the other records of r's fetch; hctx, kept,
	// would link that fetch to the slab of r's last run and on to older fetches.
	var zero V
	r.hctx, r.v = nil, zero
	if settled {
		if through, moved := p.track.Settle(r.rec.Offset); moved {
			p.next = through + 1
		}
	}
	p.open--
	c.open--
	resume = p.paused && !p.gone.Load() && p.open <= c.cfg.partitionLimit/2
	if resume {
		p.paused = false
	}
	return resume
}

// recordHeaders reads a record's headers as a consumer.Carrier: a pointer, so
// that carrying it costs no allocation.
type recordHeaders kgo.Record

func (h *recordHeaders) Get(key string) string { return headers(h.Headers).Get(key) }

func (h *recordHeaders) Keys() []string { return headers(h.Headers).Keys() }

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
