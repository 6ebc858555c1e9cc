package kafkashare

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/kafkaconf"
	"github.com/idemkit/idemkit/internal/observe"
	"github.com/idemkit/idemkit/internal/retry"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Why the adapter cancels a handler: the record's acquisition lock is about to
// run out (another member may get the record), or Run's context ended and the
// shutdown grace is over. Either way the attempt is not counted (the engine sees
// a cancellation it did not make: consumer.ErrInterrupted) and the record is
// released.
var (
	errLockExpiring = errors.New("kafkashare: the record's acquisition lock is about to run out")
	errShutdown     = errors.New("kafkashare: consumer shutting down")
)

// Record states within a poll.
const (
	stateWaiting = iota // taken, or waiting for a timer: nothing of it runs
	stateRunning        // in the pipeline (claimed or claiming)
	stateCopying        // its dead-letter copy is being produced
	stateDone           // its terminal acknowledgement is given
)

// held is one record of a poll, from its delivery to its terminal
// acknowledgement. The records of a poll are allocated together (newPoll).
type held[V any] struct {
	rec      *kgo.Record
	v        V
	key      consumer.Key
	keyed    bool            // key is the record's key header's, set when the poll began
	count    int32           // the broker's delivery count
	msg      observe.Message // its headers and origin, for the engine's events and tracers
	deadline atomic.Int64    // unix nanos: the acquisition lock's end as far as we know

	mu        sync.Mutex
	state     int
	cancel    context.CancelCauseFunc // the running attempt's
	timer     *time.Timer
	busySince time.Time       // first IN_PROGRESS answer
	tries     int             // store outages waited out in place
	hctx      context.Context // its handler's context in this delivery's last run (the span its dead letter carries); nil before one
}

// poll is one poll's records: its members are acknowledged, each once, before
// the client polls again.
type poll[V, T any] struct {
	c        *Consumer[V, T]
	cl       *kgo.Client
	recs     []*held[V]
	base     context.Context // the records' contexts' parent: not cancelled by Run's
	lockDur  time.Duration   // the acquisition lock, as estimated from this poll
	margin   time.Duration
	left     atomic.Int64 // records without their terminal acknowledgement
	done     chan struct{}
	stopping atomic.Bool // Run's context ended: waiting records are released
	work     sync.WaitGroup

	settle func(context.Context, consumer.Result[T]) // settled, the DoneContext of every record
}

func newPoll[V, T any](c *Consumer[V, T], cl *kgo.Client, recs []*kgo.Record) *poll[V, T] {
	now := time.Now()
	p := &poll[V, T]{c: c, cl: cl, recs: make([]*held[V], len(recs)), done: make(chan struct{})}
	p.settle = p.settled
	hs := make([]held[V], len(recs))
	if c.cfg.KeyFunc == nil {
		kafkaconf.HeaderKeys(recs, c.cfg.KeyHeader, func(i int, k consumer.Key) { hs[i].key, hs[i].keyed = k, true })
	}
	var latest time.Time
	for i, rec := range recs {
		h := &hs[i]
		h.rec, h.count, h.msg = rec, rec.DeliveryCount(), message(rec)
		d := rec.AcquisitionDeadline()
		h.deadline.Store(d.UnixNano())
		latest = maxTime(latest, d)
		p.recs[i] = h
	}
	// The deadline is the broker's lock counted from when kgo decoded the answer,
	// before the poll returned: the estimate is at most the real lock.
	p.lockDur = max(latest.Sub(now), 0)
	p.margin = min(c.cfg.margin, p.lockDur/4)
	p.left.Store(int64(len(recs)))
	return p
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// run starts every record and returns once each has its terminal
// acknowledgement, renewing the locks of those held meanwhile.
func (p *poll[V, T]) run(ctx context.Context) {
	p.base = context.WithoutCancel(ctx)
	for _, h := range p.recs {
		p.start(h)
	}
	renewStop := make(chan struct{})
	p.work.Add(1)
	go func() { defer p.work.Done(); p.renewer(renewStop) }()
	check := time.NewTicker(max(min(p.margin/4, 250*time.Millisecond), 10*time.Millisecond))
	defer check.Stop()
	stop := p.c.stop
	var graceEnd time.Time
	for {
		select {
		case <-p.done:
			close(renewStop)
			p.work.Wait()
			return
		case <-stop:
			stop = nil
			p.stopping.Store(true)
			graceEnd = time.Now().Add(p.c.cfg.shutdownGrace)
			p.each(func(h *held[V]) {
				if h.state == stateWaiting && h.timer != nil {
					h.timer.Stop()
					h.timer = nil
					go p.terminal(h, kgo.AckRelease, "shutdown")
				}
			})
		case now := <-check.C:
			p.checkDeadlines(now)
			if !graceEnd.IsZero() && now.After(graceEnd) {
				p.each(func(h *held[V]) {
					if h.state == stateRunning && h.cancel != nil {
						h.cancel(errShutdown)
					}
				})
			}
		}
	}
}

// each runs fn on every record not done, under its lock.
func (p *poll[V, T]) each(fn func(h *held[V])) {
	for _, h := range p.recs {
		h.mu.Lock()
		if h.state != stateDone {
			fn(h)
		}
		h.mu.Unlock()
	}
}

// checkDeadlines cancels the handlers of records whose lock is about to run out
// and releases the waiting ones: the broker is about to give them to another
// member, and a record released by us is redelivered at once.
func (p *poll[V, T]) checkDeadlines(now time.Time) {
	p.each(func(h *held[V]) {
		if now.UnixNano() < h.deadline.Load()-int64(p.margin) {
			return
		}
		switch h.state {
		case stateRunning:
			if h.cancel != nil {
				h.cancel(errLockExpiring)
			}
		case stateWaiting:
			if h.timer != nil {
				h.timer.Stop()
				h.timer = nil
				go p.terminal(h, kgo.AckRelease, "lock-expiring")
			}
		}
	})
}

// renewer renews the locks of the records held every third of the lock, and
// moves their deadlines once the broker confirmed it (kgo resets a record's renew
// state when the broker answers; FlushAcks waits for that answer and for
// ShareAckCallback). A renewal the broker refused or did not answer moves
// nothing: the records are released before their old deadline.
func (p *poll[V, T]) renewer(stop <-chan struct{}) {
	every := max(p.lockDur/3, 50*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	var renewed []*held[V]
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		t0 := time.Now()
		renewed = renewed[:0]
		p.each(func(h *held[V]) {
			if h.state != stateDone {
				h.rec.Ack(kgo.AckRenew)
				renewed = append(renewed, h)
			}
		})
		if len(renewed) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(p.base, every)
		err := p.cl.FlushAcks(ctx)
		cancel()
		if err != nil {
			p.c.log.Warn("kafkashare: lock renewal not confirmed in time; the records held are released before their locks run out",
				"records", len(renewed), "err", err)
			continue
		}
		until := t0.Add(p.lockDur).UnixNano()
		for _, h := range renewed {
			if p.c.refusedSince(topicPartition{h.rec.Topic, h.rec.Partition}, t0) {
				continue
			}
			if until > h.deadline.Load() {
				h.deadline.Store(until)
			}
			p.c.reportAction(h, kgo.AckRenew, "renew")
		}
	}
}

// start decodes r's value and takes its key; a record that cannot run is
// dead-lettered. A record near its delivery limit is reported once its key is
// known (DeliveryLimitHook's event carries it).
func (p *poll[V, T]) start(h *held[V]) {
	v, kind, err := p.prepare(h)
	if h.count >= p.c.cfg.deliveryLimit-1 {
		p.c.log.Warn("kafkashare: record near its delivery limit; at the limit the broker archives it",
			"topic", h.rec.Topic, "partition", h.rec.Partition, "offset", h.rec.Offset,
			"delivery_count", h.count, "limit", p.c.cfg.deliveryLimit)
		p.c.reportNearLimit(h)
	}
	if err != nil {
		p.copyLater(h, kind, 0, consumer.Error, err)
		return
	}
	h.v = v
	p.submit(h)
}

// prepare decodes h's value and sets its key; on failure it returns the
// dead-letter kind (UNDECODABLE, NO_KEY) and the reason.
func (p *poll[V, T]) prepare(h *held[V]) (V, string, error) {
	c := p.c
	v, err := c.decode(h.rec)
	if err != nil {
		h.key = "" // an undecodable record's dead letter names no idemkit key
		return v, "UNDECODABLE", err
	}
	switch {
	case c.cfg.KeyFunc != nil:
		h.key, err = c.cfg.KeyFunc(h.rec, v)
	case !h.keyed:
		h.key = c.coordinatesKey(h.rec)
	}
	if err == nil {
		err = h.key.Validate()
	}
	if err != nil {
		return v, "NO_KEY", err
	}
	return v, "", nil
}

// submit hands h to the pipeline, as a submission of its own: its context is
// cancelled when its lock is about to run out or the shutdown grace ends.
func (p *poll[V, T]) submit(h *held[V]) {
	if p.stopping.Load() {
		p.terminal(h, kgo.AckRelease, "shutdown")
		return
	}
	ctx, cancel := context.WithCancelCause(p.base)
	h.mu.Lock()
	if h.state == stateDone {
		h.mu.Unlock()
		cancel(nil)
		return
	}
	h.state, h.cancel, h.timer = stateRunning, cancel, nil
	h.mu.Unlock()
	s := &submission[V]{Context: ctx, h: h, cancel: cancel}
	err := p.c.pipe.Submit(s, consumer.PipelineItem[T]{Key: h.key, Payload: h.rec.Value, Run: p.c.run, DoneContext: p.settle})
	if err != nil { // the pipeline stopped: only at shutdown
		cancel(nil)
		p.terminal(h, kgo.AckRelease, "shutdown")
	}
}

// runHeld is the Run of every record: hctx derives from its submission.
// Consumer.run holds it as one function value for every record.
func (c *Consumer[V, T]) runHeld(hctx context.Context) (T, error) {
	h, ok := hctx.Value(heldKey{}).(*held[V])
	if !ok {
		var zero T
		return zero, errors.New("kafkashare: a handler context without its record")
	}
	h.hctx = hctx // read once the engine settled this run (Done), or by its next run
	return c.handle(hctx, h.v, h.rec)
}

// settled is the DoneContext of every record of the poll: ctx is the submission
// the result is for. poll.settle holds it as one function value.
func (p *poll[V, T]) settled(ctx context.Context, r consumer.Result[T]) {
	s := ctx.(*submission[V])
	s.cancel(nil)
	p.after(s.h, r)
}

// after maps h's result onto its share acknowledgement (the package doc's table).
func (p *poll[V, T]) after(h *held[V], r consumer.Result[T]) {
	c := p.c
	switch r.Action() {
	case consumer.Ack:
		reason := "success"
		if r.Outcome == consumer.Duplicate {
			reason = "duplicate"
		}
		p.terminal(h, kgo.AckAccept, reason)
	case consumer.DeadLetter:
		p.copyLater(h, consumer.DeadLetterKind(r.Err), r.Attempt, r.Outcome, r.Err)
	case consumer.Wait: // another owner's live claim: hold, renewed, and look again
		h.mu.Lock()
		if h.busySince.IsZero() {
			h.busySince = time.Now()
		}
		over := time.Since(h.busySince) > c.cfg.busyHold
		h.mu.Unlock()
		if over {
			p.terminal(h, kgo.AckRelease, "busy")
			return
		}
		p.later(h, min(max(r.LeaseLeft, 20*time.Millisecond), time.Second), func() { p.submit(h) })
	default: // consumer.Retry
		switch {
		case errors.Is(r.Err, consumer.ErrStoreUnavailable): // not an attempt: hold and try again in place
			h.mu.Lock()
			h.tries++
			n := h.tries
			h.mu.Unlock()
			p.later(h, retry.Backoff(c.cfg.BackoffBase, c.cfg.BackoffMax, n), func() { p.submit(h) })
		case consumer.NotAnAttempt(r.Err): // cut short by us or the caller: give it back
			p.terminal(h, kgo.AckRelease, "interrupted")
		case h.count >= c.cfg.deliveryLimit: // a release now would archive it uncopied
			p.copyLater(h, KindDeliveryLimit, r.Attempt, r.Outcome, r.Err)
		default:
			d := retry.Backoff(c.cfg.BackoffBase, c.cfg.BackoffMax, r.Attempt)
			c.reportRetry(consumer.RetryEvent{Key: h.key, Origin: origin(h.rec), Attempt: r.Attempt, Delay: d,
				Kind: consumer.ErrorKind(r.Err), Err: r.Err})
			p.later(h, d, func() { p.terminal(h, kgo.AckRelease, "retry") })
		}
	}
}

// later runs fn after d, h held (and renewed) meanwhile, unless h is released
// first (its lock running out, the shutdown).
func (p *poll[V, T]) later(h *held[V], d time.Duration, fn func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state == stateDone {
		return
	}
	if p.stopping.Load() {
		go p.terminal(h, kgo.AckRelease, "shutdown")
		return
	}
	h.state, h.cancel = stateWaiting, nil
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		h.mu.Lock()
		mine := h.timer == t && h.state == stateWaiting
		h.timer = nil
		h.mu.Unlock()
		if mine {
			fn()
		}
	})
	h.timer = t
}

// copyLater produces h's dead-letter copy in the background, then accepts h.
func (p *poll[V, T]) copyLater(h *held[V], kind string, attempts int, o consumer.Outcome, reason error) {
	h.mu.Lock()
	if h.state == stateDone {
		h.mu.Unlock()
		return
	}
	h.state, h.cancel, h.timer = stateCopying, nil, nil
	h.mu.Unlock()
	p.work.Add(1)
	go func() {
		defer p.work.Done()
		p.deadLetter(h, kind, attempts, o, reason)
	}()
}

// terminal gives h its terminal acknowledgement, once.
func (p *poll[V, T]) terminal(h *held[V], status kgo.AckStatus, reason string) {
	h.mu.Lock()
	if h.state == stateDone {
		h.mu.Unlock()
		return
	}
	h.state, h.cancel = stateDone, nil
	if h.timer != nil {
		h.timer.Stop()
		h.timer = nil
	}
	// No handler runs now, and none will: what h keeps of its runs goes. A
	// settled handler context may outlive its record (a handler may keep it, and
	// the engine allocates them in slabs), and through its submission it keeps
	// h and the poll's other records; hctx, kept, would link that poll to the
	// slab of h's last run and on to older polls.
	var zero V
	h.hctx, h.v = nil, zero
	h.mu.Unlock()
	h.rec.Ack(status)
	p.c.reportAction(h, status, reason)
	if p.left.Add(-1) == 0 {
		close(p.done)
	}
}
