package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Settling an attempt, for both engines: what its end comes to in the store
// (verdictOf, decided once), sending that and sending it again while the claim is
// live after an unclear reply (resendable), and giving claims back (release).
//
// The safety rule: only the handler's own errors count as attempts. A handler
// that never started, gave its claim back (Abandon), or was cut short by a
// cancellation it did not make (the loss of its lease, the engine's stop, its
// caller's cancellation) releases its claim uncounted; everything else is
// recorded: a completion, or a failure that counts.

// verdict is what settling an attempt comes to.
type verdict int

const (
	// verdictSend: send its settlement, a completion or a failure (counted).
	verdictSend verdict = iota + 1
	// verdictRelease: give its claim back; nothing is recorded and the attempt is
	// not counted.
	verdictRelease
	// verdictRecorded: the handler recorded its completion itself (MarkCompleted):
	// nothing to send, a success.
	verdictRecorded
)

// ending is what is known of an attempt when it settles.
type ending struct {
	started  bool  // its handler started
	herr     error // what the handler returned
	recorded bool  // the handler recorded its own completion (MarkCompleted)
	// What may have cut it short, in the order verdictOf names them:
	lost      error // the loss of its lease (*LeaseLostError); nil while live
	stopped   error // the engine's stop (ErrPipelineStopped); nil while it runs
	cancelled error // the cause of the caller's context, once it ended
	own       error // the cause of the attempt's own context (a refused start), once cancelled
}

// verdictOf decides what an attempt that ended as f comes to, and the result's
// error when it is released (for the others, the store's answer decides it).
func verdictOf(f *ending) (verdict, error) {
	switch {
	case !f.started:
		return verdictRelease, notRunError(f.cutShort())
	case f.herr != nil && errors.Is(f.herr, ErrAbandoned):
		return verdictRelease, f.herr
	case f.recorded:
		return verdictRecorded, nil
	case f.herr != nil && f.lost != nil:
		return verdictRelease, f.lost
	case f.herr != nil && f.stopped != nil:
		// The engine's stop is named even when the caller's context ended too (an
		// adapter cancels both): adapters hand such a message back as it is.
		return verdictRelease, interrupted(f.stopped, f.herr)
	case f.herr != nil && f.cancelled != nil:
		return verdictRelease, interrupted(f.cancelled, f.herr)
	}
	return verdictSend, nil
}

// cutShort names what ended the attempt before its handler started: the loss of
// its lease, else the engine's stop, else its caller's cancellation, else its own
// (nil if none did).
func (f *ending) cutShort() error {
	for _, why := range [...]error{f.lost, f.stopped, f.cancelled, f.own} {
		if why != nil {
			return why
		}
	}
	return nil
}

// notRunError is the error of a message whose handler never started, for why (nil:
// an earlier item of its batch was not settled, WithStopAfterFailure).
func notRunError(why error) error {
	if why == nil {
		return fmt.Errorf("%w: an earlier item of the batch was not settled", ErrNotRun)
	}
	return fmt.Errorf("%w: %w", ErrNotRun, why)
}

// decideAll fixes, once per attempt, what settling each of as comes to (see
// verdictOf), and fills its settlement or its result accordingly. cancelled is
// the cause of the context they were claimed under (nil while it is live), unless
// each is set: each was claimed under its own handler's context's parent, which
// then tells (a Pipeline's messages: see Submit). Their leases are read under one
// lock. Later settlements of an attempt (resends) keep its decision: whatever
// happens after the handler returned, its own error still counts.
func decideAll[T any](e *engine, as []*attempt[T], cancelled error, each bool) {
	stopped := e.stoppedBy()
	now := monoNow()
	e.keep.mu.Lock()
	for _, a := range as {
		if a.verdict == 0 {
			a.lost, a.st.Late = a.lease.lost, !e.keep.liveLocked(&a.lease, now)
		}
	}
	e.keep.mu.Unlock()
	for _, a := range as {
		if a.verdict != 0 {
			continue
		}
		f := ending{started: a.started, herr: a.herr, recorded: a.hctx.completed.Load(),
			stopped: stopped, cancelled: cancelled, own: a.hctx.cause()}
		if each {
			f.cancelled = f.own
		}
		if a.lost != nil {
			f.lost = a.lost
		}
		v, err := verdictOf(&f)
		a.verdict = v
		switch v {
		case verdictRelease:
			a.res.Outcome, a.res.Err = Error, err
		case verdictSend:
			a.res.ResultDropped = fillSettlement(&e.s, &a.st, a.value, a.herr)
		}
	}
}

// settle settles decided attempts: settlements in one call, releases in another.
// An attempt whose settlement is to be sent again is left with resend set (see
// resendable); the others have their results and are no longer kept.
func settle[T any](ctx context.Context, e *engine, as []*attempt[T]) {
	// A handler that ran must be recorded if at all possible.
	ctx = context.WithoutCancel(ctx)
	// send is as itself when every attempt is sent, the common case.
	send, release := as, []*attempt[T](nil)
	if !allSent(as) {
		send = nil
		for _, a := range as {
			switch a.verdict {
			case verdictRecorded:
				markedComplete(e.s, a.res, a.value, a.herr)
				e.keep.finish(&a.lease)
			case verdictRelease:
				release = append(release, a)
			default:
				send = append(send, a)
			}
		}
	}
	if len(send) > 0 {
		sendSettlements(ctx, e, send)
	}
	if len(release) > 0 {
		releaseClaims(ctx, e, release)
	}
}

// allSent reports whether every attempt of as is to be sent.
func allSent[T any](as []*attempt[T]) bool {
	for _, a := range as {
		if a.verdict != verdictSend {
			return false
		}
	}
	return true
}

// settleDelays are the pauses before sending a settlement again; the last one
// repeats.
var settleDelays = []time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond}

// resendable reports whether a settlement answered err is sent again, after
// resendPause: while the claim is live (live; the keeper renews it meanwhile),
// one that met an unreachable store. Every settlement is sent at least once: a
// claim whose lease ran out is still its owner's until someone takes it over, and
// the compare-and-set tells. Once the lease has run out, the result is the last
// answer (the store's error, wrapping the handler's). Re-sending is bounded by
// about one lease of pauses (resendLimit): a store that keeps renewing a lease
// while it refuses every settlement must not hold the message forever; the
// keeper then stops renewing, and the record is taken over once its lease ends.
func resendable(err error, live bool, tries int, lease time.Duration) bool {
	// The cheap tests first: this runs for every settlement, and most are answered nil.
	return err != nil && live && errors.Is(err, ErrStoreUnavailable) && tries < resendLimit(lease)
}

// resendLimit is how many times a settlement is sent, at most, under a lease:
// enough pauses of resendPause to add up to the lease.
func resendLimit(lease time.Duration) int {
	n := 0
	for total := time.Duration(0); total < lease; n++ {
		total += resendPause(n + 1)
	}
	return n + 1
}

// resendPause is how long to wait before sending a settlement sent tries times
// already.
func resendPause(tries int) time.Duration {
	return settleDelays[min(max(tries-1, 0), len(settleDelays)-1)]
}

// sendSettlements sends the settlements of as in one call and fills their results,
// or marks them to be sent again (resendable).
func sendSettlements[T any](ctx context.Context, e *engine, as []*attempt[T]) {
	defer func() {
		if p := recover(); p != nil {
			perr := contained(e.s, "settling", p, len(as))
			for _, a := range as {
				a.resend = false
				a.res.Outcome, a.res.Err = Error, perr
				e.keep.finish(&a.lease)
			}
		}
	}()
	buf := settlementBufs.Get().(*settleBuf)
	if cap(buf.sts) < len(as) {
		buf.sts = make([]Settlement, 0, len(as))
	}
	sts := buf.sts[:0]
	for _, a := range as {
		sts = append(sts, a.st)
		a.tries++
	}
	if _, ok := e.store.(StoreInto); ok && cap(buf.reps) < len(sts) {
		buf.reps = make([]SettleReply, len(sts))
	}
	reps := settleOnce(ctx, e, sts, buf.reps)
	defer func() {
		// Stores keep nothing they are given: the buffer serves the next call.
		if cap(buf.sts) <= 4096 {
			clear(sts)
			clear(buf.reps[:cap(buf.reps)])
			settlementBufs.Put(buf)
		}
	}()
	// Which to send again, and the others no longer kept, under one lock.
	e.keep.mu.Lock()
	now := monoNow()
	for n, a := range as {
		if a.resend = resendable(reps[n].Err, e.keep.liveLocked(&a.lease, now), a.tries, e.s.Lease); !a.resend {
			e.keep.finishLocked(&a.lease)
		}
	}
	e.keep.mu.Unlock()
	for n, a := range as {
		if a.resend {
			continue
		}
		r := a.res
		finishResult(r, a.value, a.herr, reps[n])
		// Settled: the keeper no longer writes the lease, and lost is final.
		if lost := a.lease.lost; lost != nil && errors.Is(r.Err, ErrLeaseLost) {
			r.Err = lost
		}
		if r.Err != nil && errors.Is(r.Err, ErrLeaseLost) {
			e.s.Logger.Warn("consumer: lease lost while the handler ran: result not stored",
				"key", string(r.Key), "fence", r.Fence, "err", r.Err)
		}
	}
}

// settlementBufs hold the settlements of one Settle call and, from a store that
// implements StoreInto, their answers.
var settlementBufs = sync.Pool{New: func() any { return new(settleBuf) }}

type settleBuf struct {
	sts  []Settlement
	reps []SettleReply
}

// settleOnce is one bounded Settle call, answering every item. A store that
// implements StoreInto answers into out when out has room for every item.
func settleOnce(ctx context.Context, e *engine, sts []Settlement, out []SettleReply) []SettleReply {
	began := time.Now()
	cctx, cancel := context.WithTimeout(ctx, e.s.CallTimeout)
	var reps []SettleReply
	if si, ok := e.store.(StoreInto); ok && len(sts) > 0 && len(sts) <= cap(out) {
		reps = out[:len(sts)]
		clear(reps)
		si.SettleInto(cctx, sts, reps)
	} else {
		reps = e.store.Settle(cctx, sts)
	}
	cancel()
	if e.s.watchSettles() {
		reportSettle(e.s, len(sts), time.Since(began))
	}
	if len(reps) < len(sts) {
		short := &StoreError{Op: "settle", Err: errors.New("the store answered fewer items than it was sent")}
		for len(reps) < len(sts) {
			reps = append(reps, SettleReply{Err: short})
		}
	}
	return reps
}

// releaseClaims gives the claims of as back in one call; their results are
// decided. A failed release only delays the next claim until the lease runs out,
// so the call waits for the store as long as any other call, unless every claim's
// lease was already lost: those run out on the store within the margin anyway.
func releaseClaims[T any](ctx context.Context, e *engine, as []*attempt[T]) {
	defer func() {
		for _, a := range as {
			e.keep.finish(&a.lease)
		}
		if p := recover(); p != nil {
			contained(e.s, "releasing claims", p, len(as))
		}
	}()
	owned := make([]Owned, len(as))
	bound := max(LeaseMargin(e.s.Lease), 50*time.Millisecond)
	for n, a := range as {
		owned[n] = a.lease.owned()
		if e.keep.lostErr(&a.lease) == nil {
			bound = e.s.CallTimeout
		}
	}
	rctx, cancel := context.WithTimeout(ctx, min(bound, e.s.CallTimeout))
	errs := e.store.Release(rctx, owned)
	cancel()
	for n, a := range as {
		if n < len(errs) && errors.Is(errs[n], ErrLeaseLost) && a.started && !errors.Is(a.res.Err, ErrLeaseLost) {
			a.res.Err = fmt.Errorf("%w (handler error: %w)", errs[n], a.res.Err)
		}
	}
}
