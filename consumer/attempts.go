package consumer

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// attempts runs the handlers of one pass's claimed items under one heartbeat and
// settles them: completions and failures are compare-and-set on the owner token,
// retried while the attempt's claim is live; claims whose handler never started,
// was abandoned, or was cut short by the loss of its lease are released.
//
// Attempt k is item idx[k]. Its per-attempt state lives in slices allocated once
// per pass, so a batch costs a few allocations, not a few per message.
type attempts[T any] struct {
	store  Store
	s      Settings
	sc     *scratch
	bc     batchConfig
	fn     BatchHandler[T]
	items  []BatchItem
	out    []Result[T]
	stopAt int // with stopOnFail: no item after this index starts

	idx     []int
	sts     []Settlement // each attempt's claim; filled in as its settlement
	ctxs    []itemCtx
	leases  []lease // kept by the keeper
	grants  []time.Duration
	sent    time.Time // when the claim call was sent
	values  []T
	herrs   []error
	started []bool
	marks   []Claim // by attempt: a taken-over claim to mark counted before its handler starts; nil without one
	failed  atomic.Bool
	hb      *keeper
}

func newAttempts[T any](store Store, s Settings, sc *scratch, bc batchConfig, fn BatchHandler[T], items []BatchItem,
	out []Result[T], stopAt int, n int) *attempts[T] {
	a := &attempts[T]{store: store, s: s, sc: sc, bc: bc, fn: fn, items: items, out: out, stopAt: stopAt,
		idx: sc.idx[:0], sts: sc.sts[:0], ctxs: make([]itemCtx, 0, n), leases: sc.leases[:0], grants: make([]time.Duration, 0, n)}
	if cap(a.sts) < n || cap(a.leases) < n || cap(a.idx) < n {
		a.idx, a.sts, a.leases = make([]int, 0, n), make([]Settlement, 0, n), make([]lease, 0, n)
	}
	return a
}

// add registers item i's claim c, answered by rep, whose call was sent at sent;
// mark says the claim is to be marked counted before its handler starts.
func (a *attempts[T]) add(ctx context.Context, i int, c Claim, rep ClaimReply, sent time.Time, mark bool) {
	it := a.items[i]
	hctx, cancel := context.WithCancelCause(ctx)
	a.idx = append(a.idx, i)
	a.sts = append(a.sts, Settlement{Key: it.Key, Owner: c.Owner, Ref: rep.Ref, Fence: rep.Fence,
		Attempts: rep.Attempts, Created: rep.Created, Fingerprint: rep.Fingerprint})
	a.ctxs = append(a.ctxs, itemCtx{Context: hctx, info: Info{Key: it.Key, Scope: a.s.Scope, Attempt: rep.Attempts, Fence: rep.Fence}})
	a.leases = append(a.leases, lease{cancel: cancel})
	a.grants = append(a.grants, rep.Lease)
	if mark { // rare: the slice is made at the first one
		if a.marks == nil {
			a.marks = make([]Claim, cap(a.idx))
		}
		a.marks[len(a.idx)-1] = c
	}
	a.sent = sent
	a.out[i] = Result[T]{Key: it.Key, Attempt: rep.Attempts, Fence: rep.Fence}
}

// owned names attempt k's claim.
func (a *attempts[T]) owned(k int) Owned { return a.leases[k].owned() }

// run runs every handler, settles every attempt and stops the heartbeat, also
// when something panics on the way.
func (a *attempts[T]) run(ctx context.Context) {
	n := len(a.idx)
	a.values, a.herrs, a.started = make([]T, n), sized(a.sc.herrs, n), sized(a.sc.started, n)
	a.hb = newKeeper(ctx, a.store, a.s)
	kept := make([]*lease, n)
	for k := range a.leases {
		a.leases[k].claim = &a.sts[k] // the claim fields never change while kept
		kept[k] = &a.leases[k]
	}
	a.hb.addAll(kept, a.sent, func(k int) time.Duration { return a.grants[k] })
	defer func() {
		a.hb.stop()
		for k := range a.leases {
			a.leases[k].cancel(context.Canceled)
		}
		sc := a.sc // the keeper is stopped: its slices may serve another batch
		sc.idx, sc.sts, sc.leases, sc.herrs, sc.started = a.idx, a.sts, a.leases, a.herrs, a.started
	}()
	if a.bc.concurrency <= 1 {
		for k := range a.idx {
			func() {
				defer a.recoverItem(k)
				a.one(ctx, k)
			}()
		}
	} else {
		var wg sync.WaitGroup
		sem := make(chan struct{}, a.bc.concurrency)
		for k := range a.idx {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				defer a.recoverItem(k)
				a.one(ctx, k)
			}()
		}
		wg.Wait()
	}
	if !a.bc.perMessage {
		a.settle(ctx, nil)
		return
	}
	var rest []int
	for k := range a.idx {
		if !a.started[k] {
			rest = append(rest, k)
		}
	}
	if len(rest) > 0 {
		a.settle(ctx, rest)
	}
}

// one runs attempt k's handler, and settles it at once under per-message completion.
func (a *attempts[T]) one(ctx context.Context, k int) {
	i := a.idx[k]
	switch {
	case ctx.Err() != nil, a.bc.stopOnFail && (a.failed.Load() || i > a.stopAt):
		return // never started: released when the pass settles
	case a.ctxs[k].Err() != nil:
		return // the lease ran out before its turn came: released likewise
	}
	if a.marks != nil && a.marks[k].Owner != "" {
		m := a.marks[k]
		if err := markStart(ctx, a.store, a.s, m, a.sts[k].Fence); err != nil {
			a.leases[k].cancel(err) // not started: released, not counted
			return
		}
	}
	a.started[k] = true
	var hctx context.Context = &a.ctxs[k]
	if a.s.watchHandlers() {
		var end func(error)
		hctx, end = startHandler(hctx, a.s, "execute", &a.ctxs[k].info)
		defer func() { end(a.herrs[k]) }()
	}
	a.values[k], a.herrs[k] = callHandler(hctx, a.fn, i, a.items[i])
	if a.herrs[k] != nil {
		a.failed.Store(true)
	}
	if a.bc.perMessage {
		a.settle(ctx, []int{k})
	}
}

// recoverItem turns a panic outside the handler (a store or codec bug) into the
// item's error, so that one item cannot take the process down.
func (a *attempts[T]) recoverItem(k int) {
	if p := recover(); p != nil {
		a.recovered(k, p)
	}
}

// recovered records panic p as attempt k's error.
func (a *attempts[T]) recovered(k int, p any) {
	i := a.idx[k]
	perr := &PanicError{Value: p, Stack: debug.Stack()}
	a.s.Logger.Error("consumer: panic outside the handler", "key", string(a.items[i].Key),
		"panic", fmt.Sprint(p), "stack", string(perr.Stack))
	a.out[i].Outcome, a.out[i].Err = Error, perr
}

// settle records the attempts ks (nil: every attempt of the pass): completions and
// failures through the store, releases for those that never started, were
// abandoned, or lost their lease before the handler finished with an error.
func (a *attempts[T]) settle(ctx context.Context, ks []int) {
	all := ks == nil
	if all {
		ks = make([]int, len(a.idx))
		for k := range ks {
			ks[k] = k
		}
	}
	defer func() {
		if p := recover(); p != nil {
			for _, k := range ks {
				a.recovered(k, p)
			}
		}
	}()
	var settled, released []int
	// A claim that lost its lease to the deadline runs out on the store within the
	// margin anyway: its release is not worth a long wait.
	releaseBound := max(LeaseMargin(a.s.Lease), 50*time.Millisecond)
	for _, k := range ks {
		i := a.idx[k]
		r := &a.out[i]
		herr := a.herrs[k]
		switch lost := a.hb.lostErr(&a.leases[k]); {
		case !a.started[k]:
			released, releaseBound = append(released, k), a.s.CallTimeout
			r.Outcome = Error
			switch cause := context.Cause(ctx); {
			case cause != nil:
				r.Err = fmt.Errorf("%w: %w", ErrNotRun, cause)
			case lost != nil:
				r.Err = fmt.Errorf("%w: %w", ErrNotRun, lost)
			case context.Cause(a.ctxs[k].Context) != nil:
				r.Err = fmt.Errorf("%w: %w", ErrNotRun, context.Cause(a.ctxs[k].Context))
			default:
				r.Err = fmt.Errorf("%w: an earlier item of the batch was not settled", ErrNotRun)
			}
		case errors.Is(herr, ErrAbandoned):
			released, releaseBound = append(released, k), a.s.CallTimeout
			r.Outcome, r.Err = Error, herr
		case a.ctxs[k].completed.Load(): // the handler recorded its completion itself
			markedComplete(a.s, r, a.values[k], herr)
			a.hb.finish(&a.leases[k])
		case herr != nil && lost != nil:
			// Cut short by the loss of its lease: not counted as an attempt.
			released = append(released, k)
			r.Outcome, r.Err = Error, lost
		case herr != nil && ctx.Err() != nil:
			// Cut short by the caller's cancellation (an adapter's shutdown or
			// revocation): not counted as an attempt.
			released = append(released, k)
			r.Outcome, r.Err = Error, interrupted(context.Cause(ctx), herr)
		default:
			a.sts[k].Late = !a.hb.live(&a.leases[k])
			r.ResultDropped = fillSettlement(a.s, &a.sts[k], a.values[k], herr)
			settled = append(settled, k)
		}
	}
	if len(settled) > 0 {
		a.sendSettled(ctx, settled, all && len(settled) == len(a.idx))
	}
	if len(released) > 0 {
		a.release(ctx, released, releaseBound)
	}
}

// sendSettled sends the settlements of attempts ks (every attempt, in order, when
// whole) and fills their results.
func (a *attempts[T]) sendSettled(ctx context.Context, ks []int, whole bool) {
	sts := a.sts
	if !whole {
		sts = make([]Settlement, len(ks))
		for n, k := range ks {
			sts[n] = a.sts[k]
		}
	}
	reps := a.send(ctx, sts, ks)
	for n, k := range ks {
		r := &a.out[a.idx[k]]
		finishResult(r, a.values[k], a.herrs[k], reps[n])
		if lost := a.hb.finish(&a.leases[k]); lost != nil && errors.Is(r.Err, ErrLeaseLost) {
			r.Err = lost
		}
		if errors.Is(r.Err, ErrLeaseLost) {
			a.s.Logger.Warn("consumer: lease lost while the handler ran: result not stored",
				"key", string(r.Key), "fence", r.Fence, "err", r.Err)
		}
	}
}

// release gives the claims of attempts ks back, waiting at most bound.
func (a *attempts[T]) release(ctx context.Context, ks []int, bound time.Duration) {
	owned := make([]Owned, len(ks))
	for n, k := range ks {
		owned[n] = a.owned(k)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(bound, a.s.CallTimeout))
	errs := a.store.Release(rctx, owned) // a failed release only delays the next claim until the lease expires
	cancel()
	for n, k := range ks {
		a.hb.finish(&a.leases[k])
		if n < len(errs) && errors.Is(errs[n], ErrLeaseLost) && a.started[k] {
			r := &a.out[a.idx[k]]
			if !errors.Is(r.Err, ErrLeaseLost) {
				r.Err = fmt.Errorf("%w (handler error: %w)", errs[n], r.Err)
			}
		}
	}
}

// settleDelays are the pauses before sending a settlement again after the store
// was unreachable; the last one repeats.
var settleDelays = []time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond}

// send sends settlements sts of attempts ks, and sends again those that met an
// unreachable store for as long as their attempt's claim is live (the heartbeat
// keeps renewing it). It does not use ctx's cancellation: a handler that ran must
// be recorded if at all possible. Every attempt is sent at least once: a claim whose
// lease ran out is still the owner's until someone else takes it, and the
// compare-and-set tells.
func (a *attempts[T]) send(ctx context.Context, sts []Settlement, ks []int) []SettleReply {
	ctx = context.WithoutCancel(ctx)
	out := a.settleOnce(ctx, sts)
	for try := 0; ; try++ {
		var again []int
		for n := range out {
			if errors.Is(out[n].Err, ErrStoreUnavailable) && a.hb.live(&a.leases[ks[n]]) {
				again = append(again, n)
			}
		}
		if len(again) == 0 {
			return out
		}
		time.Sleep(settleDelays[min(try, len(settleDelays)-1)])
		batch := make([]Settlement, len(again))
		for j, n := range again {
			batch[j] = sts[n]
		}
		for j, rep := range a.settleOnce(ctx, batch) {
			out[again[j]] = rep
		}
	}
}

// settleOnce is one bounded Settle call, answering every item.
func (a *attempts[T]) settleOnce(ctx context.Context, sts []Settlement) []SettleReply {
	began := time.Now()
	cctx, cancel := context.WithTimeout(ctx, a.s.CallTimeout)
	reps := a.store.Settle(cctx, sts)
	cancel()
	if a.s.watchSettles() {
		reportSettle(a.s, len(sts), time.Since(began))
	}
	if len(reps) < len(sts) {
		short := &StoreError{Op: "settle", Err: errors.New("the store answered fewer items than it was sent")}
		for len(reps) < len(sts) {
			reps = append(reps, SettleReply{Err: short})
		}
	}
	return reps
}

// callHandler runs fn, turning a panic into a *PanicError.
func callHandler[T any](ctx context.Context, fn BatchHandler[T], i int, it BatchItem) (v T, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &PanicError{Value: p, Stack: debug.Stack()}
		}
	}()
	return fn(ctx, i, it)
}
