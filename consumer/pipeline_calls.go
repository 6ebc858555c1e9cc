package consumer

import (
	"context"
	"time"
)

// The Pipeline's calls: when a claim or settle call is due (the gather rule in
// the Pipeline's doc), the loop that starts them, and what each call does with
// its messages.

// claimable is how many waiting messages a claim call may take now: claims
// follow free handlers plus one call's read-ahead. p.mu is held.
func (p *Pipeline[T]) claimable() int {
	room := p.cfg.concurrency + p.cfg.maxBatch - p.active - p.claiming
	return max(0, min(len(p.ready), room, p.cfg.maxBatch))
}

// claimDue reports whether a claim call of claimable messages is due at now: a
// full call, nothing else under way, or the gather delay has passed since a claim
// call could first take a message (claimSince, which it keeps). p.mu is held.
func (p *Pipeline[T]) claimDue(now int64) bool {
	n := p.claimable()
	if n == 0 {
		p.claimSince = 0
		return false
	}
	if p.claimSince == 0 {
		p.claimSince = now
	}
	return n >= p.cfg.maxBatch || p.active+p.claiming == 0 || now >= p.claimSince+p.claimGather
}

// settleDue reports whether a settle call is due at now: a full call, no handler
// left to join it, or the gather delay has passed. p.mu is held.
func (p *Pipeline[T]) settleDue(now int64) bool {
	n := len(p.settling)
	return n > 0 && (n >= p.cfg.maxBatch || p.active == 0 || now >= p.settleSince+p.settleGather)
}

// kickLocked wakes the loop when a call is due and may go, or else arms the timer
// for when one will be. p.mu is held.
func (p *Pipeline[T]) kickLocked() { p.kickAtLocked(monoNow()) }

// kickAtLocked is kickLocked at now. p.mu is held.
func (p *Pipeline[T]) kickAtLocked(now int64) {
	if p.claimDue(now) && p.claimCalls < p.cfg.calls || p.settleDue(now) && p.settleCalls < p.cfg.calls {
		p.poke()
		return
	}
	p.armLocked()
}

// armLocked arms the timer for the earliest gather deadline of what waits for a
// call that may go, unless it is armed for that already or sooner. A call that
// may not go (its calls are all under way) needs no timer: the end of one wakes
// the loop. p.mu is held.
func (p *Pipeline[T]) armLocked() {
	at := int64(0)
	if p.claimSince > 0 && p.claimCalls < p.cfg.calls {
		at = p.claimSince + p.claimGather
	}
	if len(p.settling) > 0 && p.settleCalls < p.cfg.calls && (at == 0 || p.settleSince+p.settleGather < at) {
		at = p.settleSince + p.settleGather
	}
	if at == 0 || p.timerAt < 0 || p.timerAt > 0 && p.timerAt <= at {
		return
	}
	p.timerAt = at
	p.timer.Reset(time.Duration(max(at-monoNow(), 0)))
}

// fired is the timer's: a gathering call may be due.
func (p *Pipeline[T]) fired() {
	p.mu.Lock()
	if p.timerAt > 0 {
		p.timerAt = 0
	}
	p.mu.Unlock()
	p.poke()
}

func (p *Pipeline[T]) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// loop starts claim and settle calls whenever one is due and may go.
func (p *Pipeline[T]) loop(ctx context.Context) {
	defer p.loops.Done()
	for {
		select {
		case <-p.wake:
		case <-p.quit:
			return
		}
		p.startCalls(ctx)
	}
}

// startCalls starts every call that is due and may go, settlements first (they
// free the window), then arms the timer for what gathers.
func (p *Pipeline[T]) startCalls(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		now := monoNow()
		switch {
		case p.settleDue(now) && p.settleCalls < p.cfg.calls:
			buf := p.getBuf()
			buf.batch = take(&p.settling, p.cfg.maxBatch, buf.batch)
			p.settleSince = now
			p.settleCalls++
			p.spawn(ctx, callJob[T]{claim: false, buf: buf})
		case p.claimDue(now) && p.claimCalls < p.cfg.calls:
			buf := p.getBuf()
			buf.batch = take(&p.ready, p.claimable(), buf.batch)
			p.claimSince = 0
			p.claiming += len(buf.batch)
			p.claimCalls++
			p.spawn(ctx, callJob[T]{claim: true, buf: buf})
		default:
			p.armLocked()
			return
		}
	}
}

// callJob is one claim call (claim) or settle call of buf.
type callJob[T any] struct {
	claim bool
	buf   *callBuf[T]
}

// spawn hands job to an idle call worker, or starts one. Workers outlive their
// calls: a call costs no goroutine of its own, and runs on a stack already grown
// to a store call's depth. A worker is started only when none is idle, so there
// are never more than the calls that may be under way at once (twice
// WithCallsInFlight), and callq holds a job for each. p.mu is held.
func (p *Pipeline[T]) spawn(ctx context.Context, job callJob[T]) {
	if p.callIdle > 0 {
		p.callIdle--
		p.callq <- job // room for every worker: never blocks
		return
	}
	p.loops.Add(1)
	go p.callWorker(ctx, job)
}

// callWorker runs job, then each job spawn hands it, until the pipeline stops
// (every message is answered: no call is due any more).
func (p *Pipeline[T]) callWorker(ctx context.Context, job callJob[T]) {
	defer p.loops.Done()
	for {
		p.runCall(ctx, job)
		select {
		case job = <-p.callq:
		case <-p.quit:
			return
		}
	}
}

// runCall runs job, then counts it out of the calls under way (under p.mu), counts
// its worker idle, and wakes the loop.
func (p *Pipeline[T]) runCall(ctx context.Context, job callJob[T]) {
	defer func() {
		p.mu.Lock()
		if job.claim {
			p.claimCalls--
		} else {
			p.settleCalls--
		}
		p.callIdle++
		p.kickLocked()
		p.mu.Unlock()
	}()
	if job.claim {
		p.claim(ctx, job.buf)
	} else {
		p.settle(ctx, job.buf)
	}
}

// take removes up to n items from the front of *q and returns them in out's array
// (or a new one when out's is too small).
func take[E any](q *[]E, n int, out []E) []E {
	n = min(n, len(*q))
	out = sized(out, n)
	copy(out, *q)
	rest := copy(*q, (*q)[n:])
	clear((*q)[rest:])
	*q = (*q)[:rest]
	return out
}

// callBuf holds the working slices of one claim or settle call, reused by later
// calls (see Pipeline.bufs): nothing in them outlives the call.
type callBuf[T any] struct {
	batch   []*pitem[T]
	claims  []Claim
	reps    []ClaimReply // the claims' answers, from a store that implements StoreInto
	run     []*pitem[T]
	kept    []*lease
	granted []time.Duration
	as      []*attempt[T]
}

func (p *Pipeline[T]) getBuf() *callBuf[T] { return p.bufs.Get().(*callBuf[T]) }

// putBuf gives buf back for another call, without the references it holds.
func (p *Pipeline[T]) putBuf(buf *callBuf[T]) {
	clear(buf.batch[:cap(buf.batch)])
	clear(buf.claims[:cap(buf.claims)])
	clear(buf.reps[:cap(buf.reps)])
	clear(buf.run[:cap(buf.run)])
	clear(buf.kept[:cap(buf.kept)])
	clear(buf.as[:cap(buf.as)])
	p.bufs.Put(buf)
}

// claim claims buf.batch in one call and starts the handlers of what it claimed.
func (p *Pipeline[T]) claim(ctx context.Context, buf *callBuf[T]) {
	defer p.putBuf(buf)
	batch := buf.batch
	claims := sized(buf.claims, len(batch))
	buf.claims = claims
	for i, it := range batch {
		claims[i] = Claim{Key: it.Key, Fingerprint: it.fp}
	}
	newOwners(len(batch), func(i int, owner string) { claims[i].Owner = owner })
	if _, ok := p.store.(StoreInto); ok && cap(buf.reps) < len(claims) {
		buf.reps = make([]ClaimReply, len(claims))
	}
	reps, resent, sent := claimContained(ctx, &p.engine, claims, buf.reps)
	run, kept, granted := buf.run[:0], buf.kept[:0], buf.granted[:0] // run: claimed, or run unguarded
	for i, it := range batch {
		it.sent = sent
		switch rep := reps[i]; {
		case runsUnguarded(p.s, rep):
			it.unguarded = rep.Err
			run = append(run, it)
		case rep.Err == nil && rep.Claimed():
			it.claimedIn(&p.engine, &claims[i], rep)
			if needsMark(rep, resent, i) {
				mark := claims[i] // claims serves later calls
				it.mark = &mark
			}
			run = append(run, it)
			kept, granted = append(kept, &it.lease), append(granted, rep.Lease)
		}
	}
	buf.run, buf.kept, buf.granted = run, kept, granted
	if len(kept) > 0 {
		p.keep.addLeases(kept, sent, granted)
	}
	p.mu.Lock()
	p.claiming -= len(batch)
	p.active += len(run)
	if p.runHead > 0 && len(p.runq)+len(run) > cap(p.runq) { // make room at the front first
		n := copy(p.runq, p.runq[p.runHead:])
		clear(p.runq[n:])
		p.runq, p.runHead = p.runq[:n], 0
	}
	p.runq = append(p.runq, run...)
	p.wakeWorkerLocked()
	p.mu.Unlock()
	for i, it := range batch {
		switch rep := reps[i]; {
		case runsUnguarded(p.s, rep) || rep.Err == nil && rep.Claimed():
		case rep.Err != nil:
			p.finish(it, Result[T]{Outcome: Error, Key: it.Key, Err: rep.Err})
		default:
			p.finish(it, resolve[T](p.s, it.Key, rep))
		}
	}
}

// Handler workers. A claim call's messages queue in runq; workers take them one
// at a time. While handlers are quick, workers are woken one by one: the claim
// call wakes one (or starts one, up to WithConcurrency), and a worker that takes
// a message and leaves more queued wakes the next, unless one is already on its
// way; quick handlers are then run by the few workers that keep up, without a
// goroutine switch per message. Once handlers take longer (slowHandler, on a
// moving average), every queued message gets a worker at once.

// slowHandler is the average handler time from which every queued message is
// given a worker at once.
const slowHandler = int64(20 * time.Microsecond)

// wakeWorkerLocked wakes idle workers, or starts new ones up to WithConcurrency,
// for the messages waiting in runq that no worker on its way will take. p.mu is
// held.
func (p *Pipeline[T]) wakeWorkerLocked() {
	queued := len(p.runq) - p.runHead
	if queued == 0 {
		return
	}
	want := 1
	if p.handlerNs >= slowHandler {
		want = queued
	}
	want -= p.signalled + p.starting
	for ; want > 0 && p.idle > p.signalled; want-- {
		p.signalled++
		p.workCond.Signal()
	}
	for ; want > 0 && p.workers < p.cfg.concurrency; want-- {
		p.starting++
		p.workers++
		p.loops.Add(1)
		go p.work()
	}
}

// work runs claimed messages' handlers, one at a time, until Shutdown ends it.
func (p *Pipeline[T]) work() {
	defer p.loops.Done()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.starting--
	for {
		if p.runHead == len(p.runq) {
			if p.runClosed {
				return
			}
			p.idle++
			p.workCond.Wait()
			p.idle--
			if p.signalled > 0 {
				p.signalled-- // a Broadcast wakes workers nobody counted
			}
			continue
		}
		it := p.runq[p.runHead]
		p.runq[p.runHead] = nil
		p.runHead++
		if p.runHead == len(p.runq) { // empty: the array serves the next claim calls
			p.runq, p.runHead = p.runq[:0], 0
		}
		p.wakeWorkerLocked()
		p.mu.Unlock()
		p.run(it)
		p.mu.Lock()
	}
}

// run runs one claimed message's handler (see attempt.run), then queues its
// settlement.
func (p *Pipeline[T]) run(it *pitem[T]) {
	if it.unguarded != nil {
		r := runUnguarded(it.hctx.plain(), p.s, it.Key, it.unguarded, handlerCall[T]{run: it.Run})
		p.mu.Lock()
		p.active--
		p.kickLocked()
		p.mu.Unlock()
		p.finish(it, r)
		return
	}
	began := monoNow()
	it.attempt.run(it.hctx.plain(), &p.engine, handlerCall[T]{run: it.Run})
	now := monoNow()
	p.mu.Lock()
	p.handlerNs += (now - began - p.handlerNs) / 8
	p.active--
	p.settleLocked(it, now)
	p.mu.Unlock()
}

// settleLocked queues it's settlement for a settle call at now. p.mu is held.
func (p *Pipeline[T]) settleLocked(it *pitem[T], now int64) {
	if len(p.settling) == 0 {
		p.settleSince = now
	}
	p.settling = append(p.settling, it)
	p.kickAtLocked(now)
}

// settle settles buf.batch, handled messages (see settle), then answers each, or
// queues its settlement to be sent again after a pause.
func (p *Pipeline[T]) settle(ctx context.Context, buf *callBuf[T]) {
	defer p.putBuf(buf)
	batch := buf.batch
	as := sized(buf.as, len(batch))
	buf.as = as
	for n, it := range batch {
		as[n] = &it.attempt
	}
	decideAll(&p.engine, as, nil, true)
	settle(ctx, &p.engine, as)
	settled := batch[:0] // batch is this call's own
	for _, it := range batch {
		if it.resend {
			p.again(it)
			continue
		}
		settled = append(settled, it)
	}
	p.finishAll(settled)
}

// again queues it's settlement to be sent once more after a pause.
func (p *Pipeline[T]) again(it *pitem[T]) {
	p.loops.Add(1)
	time.AfterFunc(resendPause(it.tries), func() {
		defer p.loops.Done()
		p.mu.Lock()
		p.settleLocked(it, monoNow())
		p.mu.Unlock()
	})
}
