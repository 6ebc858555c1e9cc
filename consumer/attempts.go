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
type attempts[T any] struct {
	store  Store
	s      Settings
	bc     batchConfig
	fn     BatchHandler[T]
	items  []BatchItem
	out    []Result[T]
	stopAt int // with stopOnFail: no item after this index starts

	idx     []int        // item index of each attempt
	claims  []Settlement // each attempt's claim, as a settlement still to fill
	beats   []*beat
	hctxs   []context.Context
	values  []T
	herrs   []error
	started []bool
	failed  atomic.Bool
	hb      *heartbeat
}

func newAttempts[T any](store Store, s Settings, bc batchConfig, fn BatchHandler[T], items []BatchItem,
	out []Result[T], stopAt int) *attempts[T] {
	return &attempts[T]{store: store, s: s, bc: bc, fn: fn, items: items, out: out, stopAt: stopAt}
}

// add registers item i's claim c, answered by rep, whose call was sent at sent.
func (a *attempts[T]) add(ctx context.Context, i int, c Claim, rep ClaimReply, sent time.Time) {
	hctx, cancel := context.WithCancelCause(ctx)
	it := a.items[i]
	a.idx = append(a.idx, i)
	a.claims = append(a.claims, Settlement{Key: it.Key, Owner: c.Owner, Ref: rep.Ref, Fence: rep.Fence,
		Attempts: rep.Attempts, Created: rep.Created, Fingerprint: c.Fingerprint})
	a.hctxs = append(a.hctxs, withInfo(hctx, Info{Key: it.Key, Scope: a.s.Scope, Attempt: rep.Attempts, Fence: rep.Fence}))
	a.beats = append(a.beats, newBeat(Owned{Key: it.Key, Owner: c.Owner, Ref: rep.Ref, Fence: rep.Fence}, cancel, sent,
		rep.Lease, LeaseMargin(a.s.Lease)))
	a.out[i] = Result[T]{Key: it.Key, Attempt: rep.Attempts, Fence: rep.Fence}
}

// run runs every handler, settles every attempt and stops the heartbeat, also
// when something panics on the way.
func (a *attempts[T]) run(ctx context.Context) {
	n := len(a.idx)
	a.values, a.herrs, a.started = make([]T, n), make([]error, n), make([]bool, n)
	a.hb = startHeartbeat(ctx, a.store, a.s, a.beats)
	defer func() {
		a.hb.stop()
		for _, b := range a.beats {
			b.cancel(context.Canceled)
		}
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
	var rest []int
	for k := range a.idx {
		if !a.bc.perMessage || !a.started[k] {
			rest = append(rest, k)
		}
	}
	a.settle(ctx, rest)
}

// one runs attempt k's handler, and settles it at once under per-message completion.
func (a *attempts[T]) one(ctx context.Context, k int) {
	i := a.idx[k]
	switch {
	case ctx.Err() != nil, a.bc.stopOnFail && (a.failed.Load() || i > a.stopAt):
		return // never started: released when the pass settles
	case a.hctxs[k].Err() != nil:
		return // the lease ran out before its turn came: released likewise
	}
	a.started[k] = true
	a.values[k], a.herrs[k] = callHandler(a.hctxs[k], a.fn, i, a.items[i])
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

// settle records the attempts ks: completions and failures through the store,
// releases for those that never started, were abandoned or lost their lease
// before the handler finished with an error.
func (a *attempts[T]) settle(ctx context.Context, ks []int) {
	if len(ks) == 0 {
		return
	}
	defer func() {
		if p := recover(); p != nil {
			for _, k := range ks {
				a.recovered(k, p)
			}
		}
	}()
	var sts []Settlement
	var settled, released []int
	var release []Owned
	// A claim that lost its lease to the deadline runs out on the store within the
	// margin anyway: its release is not worth a long wait.
	releaseBound := max(LeaseMargin(a.s.Lease), 50*time.Millisecond)
	for _, k := range ks {
		i := a.idx[k]
		r := &a.out[i]
		herr := a.herrs[k]
		switch {
		case !a.started[k]:
			released, release = append(released, k), append(release, a.beats[k].owned)
			releaseBound = a.s.CallTimeout
			r.Outcome = Error
			switch cause := context.Cause(ctx); {
			case cause != nil:
				r.Err = fmt.Errorf("%w: %w", ErrNotRun, cause)
			case a.hb.lostErr(a.beats[k]) != nil:
				r.Err = fmt.Errorf("%w: %w", ErrNotRun, a.hb.lostErr(a.beats[k]))
			default:
				r.Err = fmt.Errorf("%w: an earlier item of the batch was not settled", ErrNotRun)
			}
		case errors.Is(herr, ErrAbandoned):
			released, release = append(released, k), append(release, a.beats[k].owned)
			releaseBound = a.s.CallTimeout
			r.Outcome, r.Err = Error, herr
		case herr != nil && a.hb.lostErr(a.beats[k]) != nil:
			// Cut short by the loss of its lease: not counted as an attempt.
			released, release = append(released, k), append(release, a.beats[k].owned)
			r.Outcome, r.Err = Error, a.hb.lostErr(a.beats[k])
		default:
			claim := a.claims[k]
			claim.Late = !a.hb.live(a.beats[k])
			st, dropped := settlement(a.s, claim, a.values[k], herr)
			r.ResultDropped = dropped
			sts, settled = append(sts, st), append(settled, k)
		}
	}
	if len(sts) > 0 {
		reps := a.send(ctx, sts, settled)
		for n, k := range settled {
			r := &a.out[a.idx[k]]
			finishResult(r, a.values[k], a.herrs[k], reps[n])
			if lost := a.hb.finish(a.beats[k]); lost != nil && errors.Is(r.Err, ErrLeaseLost) {
				r.Err = lost
			}
			if errors.Is(r.Err, ErrLeaseLost) {
				a.s.Logger.Warn("consumer: lease lost while the handler ran: result not stored",
					"key", string(r.Key), "fence", r.Fence, "err", r.Err)
			}
		}
	}
	if len(release) > 0 {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(releaseBound, a.s.CallTimeout))
		errs := a.store.Release(rctx, release) // a failed release only delays the next claim until the lease expires
		cancel()
		for n, k := range released {
			a.hb.finish(a.beats[k])
			if n < len(errs) && errors.Is(errs[n], ErrLeaseLost) && a.started[k] {
				r := &a.out[a.idx[k]]
				if !errors.Is(r.Err, ErrLeaseLost) {
					r.Err = fmt.Errorf("%w (handler error: %w)", errs[n], r.Err)
				}
			}
		}
	}
}

// settleDelays are the pauses before sending a settlement again after the store
// was unreachable; the last one repeats.
var settleDelays = []time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond}

// send sends settlements, and sends again those that met an unreachable store
// for as long as their attempt's claim is live (the heartbeat keeps renewing it).
// It does not use ctx's cancellation: a handler that ran must be recorded if at all
// possible. Every attempt is sent at least once: a claim whose lease ran out is
// still the owner's until someone else takes it, and the compare-and-set tells.
func (a *attempts[T]) send(ctx context.Context, sts []Settlement, ks []int) []SettleReply {
	ctx = context.WithoutCancel(ctx)
	out := make([]SettleReply, len(sts))
	idx := make([]int, len(sts))
	for n := range idx {
		idx[n] = n
	}
	for try := 0; ; try++ {
		batch := sts
		if len(idx) < len(sts) {
			batch = make([]Settlement, len(idx))
			for j, n := range idx {
				batch[j] = sts[n]
			}
		}
		cctx, cancel := context.WithTimeout(ctx, a.s.CallTimeout)
		reps := a.store.Settle(cctx, batch)
		cancel()
		var again []int
		for j, n := range idx {
			if j < len(reps) {
				out[n] = reps[j]
			} else {
				out[n] = SettleReply{Err: &StoreError{Op: "settle", Err: errors.New("the store answered fewer items than it was sent")}}
			}
			if errors.Is(out[n].Err, ErrStoreUnavailable) && a.hb.live(a.beats[ks[n]]) {
				again = append(again, n)
			}
		}
		if len(again) == 0 {
			return out
		}
		time.Sleep(settleDelays[min(try, len(settleDelays)-1)])
		idx = again
	}
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
