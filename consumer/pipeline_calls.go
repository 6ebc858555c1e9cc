package consumer

import (
	"context"
	"sync"
	"time"
)

// The Pipeline's calls: when a claim or settle call is due (the gather rule in
// the Pipeline's doc), the loop that starts them, and what each call does with
// its messages.

func monoNow() int64 { return mono(time.Now()) }

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
func (p *Pipeline[T]) kickLocked() {
	now := monoNow()
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
			batch := take(&p.settling, p.cfg.maxBatch)
			p.settleSince = now
			p.settleCalls++
			p.spawn(func() { p.settle(ctx, batch) }, &p.settleCalls)
		case p.claimDue(now) && p.claimCalls < p.cfg.calls:
			batch := take(&p.ready, p.claimable())
			p.claimSince = 0
			p.claiming += len(batch)
			p.claimCalls++
			p.spawn(func() { p.claim(ctx, batch) }, &p.claimCalls)
		default:
			p.armLocked()
			return
		}
	}
}

// spawn runs call in a goroutine that counts itself out of *calls (under p.mu)
// when it ends and wakes the loop.
func (p *Pipeline[T]) spawn(call func(), calls *int) {
	p.loops.Add(1)
	go func() {
		defer p.loops.Done()
		defer func() {
			p.mu.Lock()
			*calls--
			p.kickLocked()
			p.mu.Unlock()
		}()
		call()
	}()
}

// take removes and returns up to n items from the front of *q.
func take[E any](q *[]E, n int) []E {
	n = min(n, len(*q))
	out := make([]E, n)
	copy(out, *q)
	rest := copy(*q, (*q)[n:])
	clear((*q)[rest:])
	*q = (*q)[:rest]
	return out
}

// claim claims batch in one call and starts the handlers of what it claimed.
func (p *Pipeline[T]) claim(ctx context.Context, batch []*pitem[T]) {
	claims := make([]Claim, len(batch))
	for i, it := range batch {
		claims[i] = Claim{Key: it.Key, Fingerprint: it.fp}
	}
	newOwners(len(batch), func(i int, owner string) { claims[i].Owner = owner })
	var out []ClaimReply // the answers' slice, when the store answers into one
	if _, ok := p.store.(StoreInto); ok {
		buf := claimReplyBufs.Get().(*[]ClaimReply)
		if cap(*buf) < len(claims) {
			*buf = make([]ClaimReply, len(claims))
		}
		out = *buf
		defer func() {
			clear(out[:cap(out)]) // drop references to records' keys and results
			claimReplyBufs.Put(buf)
		}()
	}
	reps, resent, sent := claimContained(ctx, &p.engine, claims, out)
	run := make([]*pitem[T], 0, len(batch)) // claimed, or run unguarded
	var kept []*lease
	var granted []time.Duration
	for i, it := range batch {
		it.sent = sent
		switch rep := reps[i]; {
		case runsUnguarded(p.s, rep):
			it.unguarded = rep.Err
			run = append(run, it)
		case rep.Err == nil && rep.Claimed():
			it.claimedIn(&p.engine, &claims[i], rep)
			if needsMark(rep, resent, i) {
				it.mark = &claims[i]
			}
			run = append(run, it)
			if kept == nil {
				kept, granted = make([]*lease, 0, len(batch)-i), make([]time.Duration, 0, len(batch)-i)
			}
			kept, granted = append(kept, &it.lease), append(granted, rep.Lease)
		}
	}
	if len(kept) > 0 {
		p.keep.addLeases(kept, sent, granted)
	}
	p.mu.Lock()
	p.claiming -= len(batch)
	p.active += len(run)
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

// claimReplyBufs hold the answers of one claim call of a Pipeline, from a store
// that implements StoreInto.
var claimReplyBufs = sync.Pool{New: func() any { return new([]ClaimReply) }}

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
	if len(p.runq) == 0 {
		return
	}
	want := 1
	if p.handlerNs >= slowHandler {
		want = len(p.runq)
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
		if len(p.runq) == 0 {
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
		it := p.runq[0]
		p.runq[0] = nil
		p.runq = p.runq[1:]
		if len(p.runq) == 0 {
			p.runq = p.runq[:0:0] // let the array go
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
	took := monoNow() - began
	p.mu.Lock()
	p.handlerNs += (took - p.handlerNs) / 8
	p.active--
	p.settleLocked(it)
	p.mu.Unlock()
}

// settleLocked queues it's settlement for a settle call. p.mu is held.
func (p *Pipeline[T]) settleLocked(it *pitem[T]) {
	if len(p.settling) == 0 {
		p.settleSince = monoNow()
	}
	p.settling = append(p.settling, it)
	p.kickLocked()
}

// settle settles a batch of handled messages (see settle), then answers each, or
// queues its settlement to be sent again after a pause.
func (p *Pipeline[T]) settle(ctx context.Context, batch []*pitem[T]) {
	as := make([]*attempt[T], len(batch))
	for n, it := range batch {
		as[n] = &it.attempt
	}
	decideAll(nil, &p.engine, as)
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
		p.settleLocked(it)
		p.mu.Unlock()
	})
}
