package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/idemkit/idemkit/consumer"
)

// aheadWindows bounds how far the replay reads past the oldest message whose result
// it has not yet counted, in windows (batch sizes): a message that takes long holds
// back the checkpoint and the report, not the messages after it, up to this bound.
const aheadWindows = 4

// executor is one Execute. Its fields are the replay goroutine's, but those under
// mu, which the engine's goroutines set as results arrive.
type executor[T any] struct {
	c       config
	store   consumer.Store
	s       consumer.Settings
	fn      Handler[T]
	eng     engine[T]
	start   time.Time
	rep     Report
	resume  Checkpoint      // the one Execute resumed from: the messages before it are skipped
	blocked map[string]bool // partitions the checkpoint may no longer pass in this run
	ack     Acknowledger    // nil unless the source is a queue
	saved   time.Time
	dirty   bool
	err     error          // why the replay takes no more messages, when not ctx
	queue   []*batch       // taken and not yet counted, in source order
	tracked int            // messages in queue
	cur     *batch         // the batch being handed over (also in queue)
	sent    int            // messages handed to the engine (WithRate)
	chunk   int            // see room
	full    bool           // the window was full: see room
	timers  sync.WaitGroup // hand-overs of IN_PROGRESS messages waiting to look again

	mu       sync.Mutex
	inflight int   // messages handed to the engine and not yet settled
	outage   error // the first error of a store that did not answer
	wake     chan struct{}
}

type readResult struct {
	msgs []Message
	err  error
}

// batch is one read of the source, as it goes through the replay: its messages are
// handed to the engine in order, and counted in order as their results arrive.
type batch struct {
	slots   []slot // the messages after the checkpoint resumed from
	read    int    // messages read
	skipped int    // before the checkpoint resumed from
	next    int    // the first slot not yet handed to the engine
	counted int    // the first slot not yet counted
}

// slot is one message of a batch.
type slot struct {
	m       Message
	payload []byte // what is fingerprinted, for a message that runs
	runs    bool   // handed to the engine; otherwise settled when taken
	until   time.Time
	// Set once, under executor.mu, by whoever settles the message.
	settled bool
	verdict Verdict
	why     string
}

// run takes batches and hands their messages to the engine as the window allows,
// and counts results in source order, until the source ends or the replay stops and
// everything handed over has settled.
func (e *executor[T]) run(ctx context.Context, batches <-chan readResult) {
	for {
		e.count(ctx)
		if e.cur != nil && e.cur.next == len(e.cur.slots) {
			e.cur = nil
		}
		stopping := e.stopping(ctx)
		switch {
		case e.cur != nil && ctx.Err() != nil:
			e.notRun(ctx, e.cur)
			continue
		case e.cur != nil && e.room():
			e.handOver(ctx, e.cur)
			continue
		case e.cur == nil && (stopping || batches == nil):
			if e.idle() {
				return
			}
		case e.cur == nil && e.room() && e.tracked < aheadWindows*e.c.batch:
			select {
			case rr, ok := <-batches:
				if !ok || ctx.Err() != nil { // a batch read as ctx ended is not run: a resumed replay reads it again
					batches = nil
					continue
				}
				if err := e.take(ctx, rr.msgs); err != nil {
					e.fail(err)
				}
				switch {
				case errors.Is(rr.err, io.EOF):
					batches = nil
				case rr.err != nil:
					e.fail(fmt.Errorf("replay: read %s: %w", e.rep.Source, rr.err))
				}
			case <-e.wake:
			case <-ctx.Done():
			}
			continue
		}
		e.wait(ctx, stopping)
	}
}

// wait waits for a result, or for ctx to end while the replay is not stopping yet.
func (e *executor[T]) wait(ctx context.Context, stopping bool) {
	if stopping {
		<-e.wake
		return
	}
	select {
	case <-e.wake:
	case <-ctx.Done():
	}
}

// fail records why the replay takes no more messages; the first reason stands.
func (e *executor[T]) fail(err error) {
	if e.err == nil {
		e.err = err
	}
}

// stopping reports whether the replay takes no more batches: ctx ended, or it
// failed, or the store did not answer for a message.
func (e *executor[T]) stopping(ctx context.Context) bool {
	e.mu.Lock()
	outage := e.outage
	e.mu.Unlock()
	if outage != nil {
		e.fail(fmt.Errorf("replay: the store did not answer, so the replay stopped after this batch; run it again once the store answers: %w", outage))
	}
	return e.err != nil || ctx.Err() != nil
}

// room reports whether the engine's window has room for one more message. Once the
// window was full, it waits for room for a chunk of them (see chunk), so that the
// engine's claim calls carry many messages instead of one each as results trickle
// in.
func (e *executor[T]) room() bool {
	e.mu.Lock()
	free := e.c.batch - e.inflight
	e.mu.Unlock()
	switch {
	case free <= 0:
		e.full = true
		return false
	case e.full && free < e.chunk:
		return false
	}
	e.full = false
	return true
}

// chunk is how much room a full window waits for before it takes more messages:
// a quarter of the window, less when the messages left waiting for a handler would
// not keep twice the handlers busy, and at least one.
func chunk(window, handlers int) int {
	return max(1, min(window/4, window-2*handlers))
}

// idle reports whether every message taken is settled and counted.
func (e *executor[T]) idle() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.inflight == 0 && len(e.queue) == 0
}

// take prepares a batch: it skips what the checkpoint it resumed from covers,
// settles at once what cannot run (INVALID, QUARANTINE) and refuses the batch when
// it holds messages beyond the retention without records. A refused batch is read
// but not run; the replay stops.
func (e *executor[T]) take(ctx context.Context, msgs []Message) error {
	if len(msgs) == 0 {
		return nil
	}
	b := &batch{read: len(msgs)}
	refuse := func(err error) error {
		e.rep.Read += b.read
		e.rep.Skipped += b.skipped
		return err
	}
	for _, m := range msgs {
		if e.resume.Done(m) {
			b.skipped++
			continue
		}
		sl := slot{m: m}
		why := invalid(m)
		switch {
		case why != "":
			sl.settled, sl.verdict, sl.why = true, Invalid, why
		case e.c.maxReplays > 0 && replays(m) >= e.c.maxReplays:
			sl.settled, sl.verdict = true, Quarantine
			sl.why = fmt.Sprintf("its %s header, %d, reached the loop guard's limit of %d (WithMaxReplays)", HeaderReplayCount, replays(m), e.c.maxReplays)
			if e.c.quarantine != nil {
				if err := e.c.quarantine(m); err != nil {
					return refuse(fmt.Errorf("replay: quarantine %q: %w", string(m.Key), err))
				}
			}
		default:
			p, err := e.c.payload(m)
			if err != nil {
				sl.settled, sl.verdict, sl.why = true, Invalid, "canonical form: "+err.Error()
				break
			}
			sl.payload, sl.runs = p, true
		}
		b.slots = append(b.slots, sl)
	}
	if err := e.checkRetention(ctx, b); err != nil {
		return refuse(err)
	}
	e.queue = append(e.queue, b)
	e.tracked += len(b.slots)
	e.cur = b
	return nil
}

// handOver hands b's next message to the engine, or settles it at once when it does
// not run.
func (e *executor[T]) handOver(ctx context.Context, b *batch) {
	sl := &b.slots[b.next]
	b.next++
	if !sl.runs {
		return
	}
	if e.pace(ctx) != nil { // ctx ended: the message is not run (see notRun)
		b.next--
		return
	}
	e.mu.Lock()
	e.inflight++
	e.mu.Unlock()
	e.sent++
	if e.s.WaitInProgress > 0 {
		sl.until = time.Now().Add(e.s.WaitInProgress)
	}
	e.send(ctx, sl)
}

// notRun settles the messages of b not yet handed over, when ctx ended: they did not
// run, and a resumed replay runs them.
func (e *executor[T]) notRun(ctx context.Context, b *batch) {
	why := fmt.Errorf("%w: %w", consumer.ErrNotRun, context.Cause(ctx))
	e.mu.Lock()
	defer e.mu.Unlock()
	for ; b.next < len(b.slots); b.next++ {
		if sl := &b.slots[b.next]; sl.runs {
			sl.settled, sl.verdict, sl.why = true, outcomeVerdict(consumer.Error, why), why.Error()
		}
	}
}

// send submits sl's message to the engine; its result comes to settle.
func (e *executor[T]) send(ctx context.Context, sl *slot) {
	m := sl.m
	err := e.eng.submit(ctx, consumer.PipelineItem[T]{Key: m.Key, Payload: sl.payload,
		Run: func(hctx context.Context) (T, error) {
			v, err := e.fn(hctx, m)
			if err != nil && ctx.Err() != nil {
				// Cut short by the replay's own stop: the claim is given back and the
				// attempt not counted.
				err = consumer.Abandon(err)
			}
			return v, err
		},
		Done: func(r consumer.Result[T]) { e.settle(ctx, sl, r) },
	})
	if err != nil { // ctx ended before the engine took it
		e.settle(ctx, sl, consumer.Result[T]{Outcome: consumer.Error, Key: m.Key, Err: fmt.Errorf("%w: %w", consumer.ErrNotRun, err)})
	}
}

// settle records a handed-over message's result. It runs on the engine's
// goroutines. A message another owner holds is handed over again, after a pause,
// while the store's WithWaitInProgress allows.
func (e *executor[T]) settle(ctx context.Context, sl *slot, r consumer.Result[T]) {
	if r.Outcome == consumer.InProgress && ctx.Err() == nil {
		if left := time.Until(sl.until); left > 0 {
			pause := max(min(left, 250*time.Millisecond, r.LeaseLeft+5*time.Millisecond), 5*time.Millisecond)
			e.timers.Add(1)
			time.AfterFunc(pause, func() {
				defer e.timers.Done()
				if ctx.Err() != nil { // stopped while it waited: it stays IN_PROGRESS
					e.settle(ctx, sl, r)
					return
				}
				e.send(ctx, sl)
			})
			return
		}
	}
	v := outcomeVerdict(r.Outcome, r.Err)
	var why string
	if r.Err != nil {
		why = r.Err.Error()
	}
	e.mu.Lock()
	sl.settled, sl.verdict, sl.why = true, v, why
	e.inflight--
	if e.outage == nil && ctx.Err() == nil && errors.Is(r.Err, consumer.ErrStoreUnavailable) {
		e.outage = r.Err
	}
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// checkRetention refuses a batch that holds messages older than the retention
// whose records are gone, unless accepted.
func (e *executor[T]) checkRetention(ctx context.Context, b *batch) error {
	if e.c.accept {
		return nil
	}
	cutoff := e.c.now().Add(-e.s.Retention)
	var keys []consumer.Key
	var oldest time.Time
	for i := range b.slots {
		if t := b.slots[i].m.Time; b.slots[i].runs && !t.IsZero() && t.Before(cutoff) {
			keys = append(keys, b.slots[i].m.Key)
			if oldest.IsZero() || t.Before(oldest) {
				oldest = t
			}
		}
	}
	if len(keys) == 0 {
		return nil
	}
	recs, err := peek(ctx, e.store, keys)
	if err != nil {
		return err
	}
	gone := 0
	for _, r := range recs {
		if r.Corrupt == "" && verdictOf(r.Record) == Unseen {
			gone++
		}
	}
	if gone == 0 {
		return nil
	}
	return fmt.Errorf("%w: %d messages of this batch (the oldest from %s) are older than the %v retention and have no record: if they ran before, they run again; accept it with WithAcceptBeyondRetention (idemkit replay --accept-beyond-retention)",
		ErrBeyondRetention, gone, oldest.UTC().Format(time.RFC3339), e.s.Retention)
}

// pace waits as WithRate asks: the n-th message is handed over no sooner than n/rate
// seconds after the start.
func (e *executor[T]) pace(ctx context.Context) error {
	if e.c.rate == 0 {
		return nil
	}
	due := e.start.Add(time.Duration(float64(e.sent) / e.c.rate * float64(time.Second)))
	wait := time.Until(due)
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// outcomeVerdict names an execution's outcome.
func outcomeVerdict(o consumer.Outcome, err error) Verdict {
	switch o {
	case consumer.Success:
		return Ran
	case consumer.Duplicate:
		if consumer.ActionFor(o, err) == consumer.DeadLetter {
			return Failed
		}
		return Duplicate
	case consumer.InProgress:
		return InProgress
	}
	switch {
	case errors.Is(err, consumer.ErrPayloadConflict):
		return Conflict
	case errors.Is(err, consumer.ErrCorruptRecord):
		return Corrupt
	case errors.Is(err, consumer.ErrInvalidKey):
		return Invalid
	case !consumer.Retryable(err):
		return Failed
	}
	return Error
}
