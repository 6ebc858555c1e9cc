package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// settle records batch's outcomes: completions and failures in one call,
// releases in another. A settlement that meets an unreachable store is sent again,
// after a pause, for as long as its claim is live (the keeper renews it meanwhile);
// every one is sent at least once, since a claim whose lease ran out is still its
// owner's until someone takes it over, and the compare-and-set tells.
func (p *Pipeline[T]) settle(ctx context.Context, batch []*pitem[T]) {
	var sts []Settlement
	var settled, released []*pitem[T]
	for _, it := range batch {
		lost := p.keep.lostErr(&it.lease)
		r := &it.result
		switch {
		case !it.started:
			why := error(ErrPipelineStopped)
			switch {
			case lost != nil:
				why = lost
			case it.hctx.Context != nil && context.Cause(it.hctx.Context) != nil && it.ctx.Err() == nil:
				why = context.Cause(it.hctx.Context)
			case it.ctx.Err() != nil:
				why = context.Cause(it.ctx)
			}
			*r = notRun[T](it.Key, why)
			released = append(released, it)
		case errors.Is(it.herr, ErrAbandoned):
			r.Outcome, r.Err = Error, it.herr
			released = append(released, it)
		case it.hctx.completed.Load(): // the handler recorded its completion itself
			markedComplete(p.s, r, it.value, it.herr)
			p.finish(it, *r)
		case it.herr != nil && lost != nil: // cut short by the loss of its lease: not counted
			r.Outcome, r.Err = Error, lost
			released = append(released, it)
		case it.herr != nil && (p.isAbandoned() || it.ctx.Err() != nil):
			// cut short by Shutdown or by the caller's cancellation (an adapter's
			// shutdown, revocation or partition loss): not counted
			// Shutdown's abandon names the pipeline's stop even when the caller's
			// context ended too (an adapter cancels both): adapters hand such a
			// message back to the broker as it is.
			cause := error(ErrPipelineStopped)
			if !p.isAbandoned() {
				cause = context.Cause(it.ctx)
			}
			r.Outcome, r.Err = Error, interrupted(cause, it.herr)
			released = append(released, it)
		default:
			if it.tries == 0 {
				it.claim.Late = !p.keep.live(&it.lease)
				r.ResultDropped = fillSettlement(p.s, &it.claim, it.value, it.herr)
			}
			sts = append(sts, it.claim)
			settled = append(settled, it)
		}
	}
	if len(sts) > 0 {
		began := time.Now()
		cctx, cancel := context.WithTimeout(ctx, p.s.CallTimeout)
		reps := p.store.Settle(cctx, sts)
		cancel()
		if p.s.watchSettles() {
			reportSettle(p.s, len(sts), time.Since(began))
		}
		for n, it := range settled {
			rep := SettleReply{Err: &StoreError{Op: "settle", Err: errors.New("the store answered fewer items than it was sent")}}
			if n < len(reps) {
				rep = reps[n]
			}
			if errors.Is(rep.Err, ErrStoreUnavailable) && p.keep.live(&it.lease) {
				p.again(it)
				continue
			}
			finishResult(&it.result, it.value, it.herr, rep)
			if lost := p.keep.finish(&it.lease); lost != nil && errors.Is(it.result.Err, ErrLeaseLost) {
				it.result.Err = lost
			}
			if errors.Is(it.result.Err, ErrLeaseLost) {
				p.s.Logger.Warn("consumer: lease lost while the handler ran: result not stored",
					"key", string(it.Key), "fence", it.claim.Fence, "err", it.result.Err)
			}
			p.finish(it, it.result)
		}
	}
	if len(released) > 0 {
		p.release(ctx, released)
	}
}

// again queues it's settlement to be sent once more after a pause.
func (p *Pipeline[T]) again(it *pitem[T]) {
	pause := settleDelays[min(it.tries, len(settleDelays)-1)]
	it.tries++
	p.loops.Add(1)
	time.AfterFunc(pause, func() {
		defer p.loops.Done()
		p.mu.Lock()
		p.settling = append(p.settling, it)
		p.mu.Unlock()
		p.poke()
	})
}

// release gives back the claims of items whose handlers did not run to a result
// worth recording, then answers them.
func (p *Pipeline[T]) release(ctx context.Context, items []*pitem[T]) {
	var owned []Owned
	var holders []*pitem[T]
	bound := p.s.CallTimeout
	for _, it := range items {
		if it.lease.claim == nil { // never claimed
			continue
		}
		owned, holders = append(owned, it.lease.owned()), append(holders, it)
		if p.keep.lostErr(&it.lease) != nil {
			// A lease lost to the deadline runs out on the store within the margin
			// anyway: its release is not worth a long wait.
			bound = min(bound, max(LeaseMargin(p.s.Lease), 50*time.Millisecond))
		}
	}
	var errs []error
	if len(owned) > 0 {
		rctx, cancel := context.WithTimeout(ctx, bound)
		errs = p.store.Release(rctx, owned) // a failed release only delays the next claim until the lease expires
		cancel()
	}
	for n, it := range holders {
		if n < len(errs) && errors.Is(errs[n], ErrLeaseLost) && it.started && !errors.Is(it.result.Err, ErrLeaseLost) {
			it.result.Err = fmt.Errorf("%w (handler error: %w)", errs[n], it.result.Err)
		}
	}
	for _, it := range items {
		p.finish(it, it.result)
	}
}
