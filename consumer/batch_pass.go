package consumer

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// pass claims the pending items in one call, runs the claimed ones and records
// every result. It returns the items found in progress.
func (b *batch[T]) pass(ctx context.Context, pending []int) (waiting []int) {
	claims := sized(b.sc.claims, len(pending))
	b.sc.claims = claims
	for j, i := range pending {
		claims[j] = Claim{Key: b.items[i].Key, Fingerprint: b.fps[i], Locked: b.bc.underLock}
	}
	newOwners(len(pending), func(j int, owner string) { claims[j].Owner = owner })
	if _, ok := b.store.(StoreInto); ok && cap(b.sc.reps) < len(claims) {
		b.sc.reps = make([]ClaimReply, len(claims))
	}
	cc := claimCall{claims: claims}
	cc.reps, cc.resent, cc.sent = claimContained(ctx, &engine{store: b.store, s: b.s}, claims, b.sc.reps)
	run, unguarded := b.sc.run[:0], []int(nil) // indexes into pending
	for j := range cc.reps {
		i, rep := pending[j], &cc.reps[j]
		switch {
		case rep.Err != nil && runsUnguarded(b.s, *rep):
			unguarded = append(unguarded, j)
		case rep.Err != nil:
			b.out[i] = Result[T]{Outcome: Error, Key: b.items[i].Key, Err: rep.Err}
		case rep.Claimed():
			run = append(run, j)
		default:
			b.out[i] = resolve[T](b.s, b.items[i].Key, *rep)
			if b.out[i].Outcome == InProgress {
				waiting = append(waiting, i)
			}
		}
		if b.bc.stopOnFail && b.out[i].Outcome != 0 && b.out[i].Action() != Ack {
			b.stopAt = min(b.stopAt, i)
		}
	}
	b.sc.run = run
	if len(run) > 0 {
		newBatchPass(ctx, b, pending, &cc, run).run(ctx)
	}
	for _, j := range unguarded {
		i := pending[j]
		b.out[i] = runUnguarded(ctx, b.s, b.items[i].Key, cc.reps[j].Err, b.call(i))
	}
	return waiting
}

// claimCall is one claim call: the claims, the store's answers, which claims were
// sent again after a lost reply (see claimAll), and when the call was sent.
type claimCall struct {
	claims []Claim
	reps   []ClaimReply
	resent []bool
	sent   time.Time
}

// runsUnguarded reports whether a claim answered rep runs its handler without a
// claim: the store is unreachable and WithFailOpen says so (never after a failed
// completion lookup: that key's attempts may be used up).
func runsUnguarded(s Settings, rep ClaimReply) bool {
	return rep.Err != nil && s.FailOpen && errors.Is(rep.Err, ErrStoreUnavailable) && !lookupFailed(rep.Err)
}

// batchPass runs the handlers of one pass's claimed items under one lease keeper
// and settles them. Attempt k is item idx[k]. The attempts live in one slice,
// reused by later batches, and their handler contexts in one allocated per pass,
// so a batch costs a few allocations, not a few per message.
type batchPass[T any] struct {
	b      *batch[T]
	e      engine
	as     []attempt[T]
	all    []*attempt[T] // &as[k], by k
	idx    []int
	stopAt int         // with WithStopAfterFailure, no item after this index starts
	failed atomic.Bool // with WithStopAfterFailure: a handler failed
}

// newBatchPass makes the attempts of the claims of cc that run (indexes into
// pending and cc), and gives their leases to a keeper of their own.
func newBatchPass[T any](ctx context.Context, b *batch[T], pending []int, cc *claimCall, run []int) *batchPass[T] {
	n := len(run)
	as, _ := b.sc.attempts.([]attempt[T]) // zero, as a pass leaves them
	if cap(as) < n {
		as = make([]attempt[T], n)
	}
	all, _ := b.sc.all.([]*attempt[T])
	p := &batchPass[T]{b: b, as: as[:n], all: sized(all, n), idx: sized(b.sc.idx, n), stopAt: b.stopAt,
		e: engine{store: b.store, s: b.s, keep: newKeeper(ctx, b.store, b.s), source: "execute"}}
	b.sc.idx = p.idx
	p.e.keep.leases = b.sc.leases[:0]
	hctxs := make([]itemCtx, n) // never reused: a handler may keep its context
	renewed := mono(cc.sent)    // every lease runs from the claim call's send
	for k, j := range run {
		i, a := pending[j], &p.as[k]
		p.idx[k], p.all[k] = i, a
		a.hctx, a.res = &hctxs[k], &b.out[i]
		rep := &cc.reps[j]
		a.claimed(ctx, &p.e, &cc.claims[j], rep)
		if needsMark(*rep, cc.resent, j) {
			a.mark = &cc.claims[j]
		}
		a.lease.renewed = renewed
		a.lease.deadline = renewed + int64(rep.Lease-p.e.keep.margin)
	}
	p.e.keep.addAll(n, func(k int) *lease { return &p.as[k].lease })
	return p
}

// run runs every handler and settles every attempt, and stops the keeper, also
// when something panics on the way.
func (p *batchPass[T]) run(ctx context.Context) {
	defer func() {
		p.e.keep.stop()
		for k := range p.as {
			p.as[k].lease.cancel(context.Canceled)
		}
		// The keeper is stopped: the attempts, and its slice of them, may serve
		// another batch.
		clear(p.as)
		clear(p.all)
		sc := p.b.sc
		sc.attempts, sc.all = p.as[:0], p.all[:0]
		sc.leases = p.e.keep.leases[:0]
		clear(sc.leases[:cap(sc.leases)])
	}()
	if c := p.b.bc.concurrency; c <= 1 {
		for k := range p.as {
			p.one(ctx, k)
		}
	} else {
		var wg sync.WaitGroup
		sem := make(chan struct{}, c)
		for k := range p.as {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				p.one(ctx, k)
			}()
		}
		wg.Wait()
	}
	rest := p.all // everything, or under per-message completion what did not start
	if p.b.bc.perMessage {
		rest = nil
		for _, a := range p.all {
			if !a.started {
				rest = append(rest, a)
			}
		}
	}
	if len(rest) > 0 {
		p.settle(ctx, rest)
	}
}

// one runs attempt k's handler, unless WithStopAfterFailure holds it back, and
// under per-message completion settles it at once.
func (p *batchPass[T]) one(ctx context.Context, k int) {
	a, i := &p.as[k], p.idx[k]
	if p.b.bc.stopOnFail && (p.failed.Load() || i > p.stopAt) {
		return // never started: released when the pass settles
	}
	a.run(ctx, &p.e, p.b.call(i))
	if a.herr != nil {
		p.failed.Store(true)
	}
	if p.b.bc.perMessage && a.started {
		p.settle(ctx, []*attempt[T]{a})
	}
}

// settle settles as, sending again, after a pause, the settlements that met an
// unreachable store while their claims were live.
func (p *batchPass[T]) settle(ctx context.Context, as []*attempt[T]) {
	decideAll(&p.e, as, context.Cause(ctx), false)
	for {
		settle(ctx, &p.e, as)
		again := as[:0:0]
		for _, a := range as {
			if a.resend {
				again = append(again, a)
			}
		}
		if len(again) == 0 {
			return
		}
		time.Sleep(resendPause(again[0].tries))
		as = again
	}
}
