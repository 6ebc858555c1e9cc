package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// LeaseMargin is how long before its lease could run out on the store's clock a
// running attempt is stopped: a drift allowance of 1% of the lease (the worker's
// clock and the store's may advance at rates that far apart) plus a tenth of the
// lease for the handler to see its cancelled context.
//
// Each attempt keeps a local deadline: the time it sent its last successful claim
// or renewal, plus the lease, minus this margin. The store's lease runs from the
// moment the store ran that call, which is later than the send, so the local
// deadline passes first. When it passes, the handler's context is cancelled with a
// *LeaseLostError cause, whether or not a renewal is still on its way: a worker cut
// off from the store (a partition, a hanging connection) stops before another
// worker can take its claim over.
func LeaseMargin(lease time.Duration) time.Duration { return lease/100 + lease/10 }

// keeper keeps the claims of running attempts alive: it renews their leases every
// lease/3 (sooner after a failed renewal), and a guard timer cancels each attempt's
// handler at its local deadline (see LeaseMargin). An attempt whose renewal is
// refused (another owner took the claim over) is cancelled at once. One keeper
// serves a batch (ExecuteBatch) or a whole Pipeline; attempts join with addAll and
// leave with finish. It runs on two timers per keeper, never one per attempt (the
// renewal timer renews every kept lease in one call; the guard is armed for the
// earliest deadline), so attempts that settle within lease/3 cost no goroutine
// and no timer. An attempt that leaves is dropped from the kept set at once (its
// slot is reused), so a keeper that lives as long as a Pipeline holds only the
// attempts under way, never those settled since its last renewal.
type keeper struct {
	store    Store
	s        Settings // for the observers
	lease    time.Duration
	margin   time.Duration
	interval time.Duration
	bound    time.Duration // longest wait for one renewal call
	tickFn   func()        // tick with the context whose values reach the store

	mu      sync.Mutex
	stopped bool
	renew   *time.Timer
	guard   *time.Timer
	wg      sync.WaitGroup // a renewal in flight
	leases  []*lease
}

// lease is one attempt under a keeper. Times are monotonic (see mono).
type lease struct {
	claim    *Settlement // the claim's Key, Owner, Ref and Fence; never changed while kept
	ctx      *itemCtx    // the handler's context, which cancel cancels
	deadline int64       // local deadline: see LeaseMargin
	renewed  int64       // send time of the last successful claim or renewal
	lost     *LeaseLostError
	done     bool // settled: no longer renewed or guarded
	slot     int  // 1 + its index in the keeper's leases while kept; 0 otherwise
	// gen counts the uses of this lease's memory: a Pipeline reuses a settled
	// message, lease included, for a later one, and bumps gen under the keeper's
	// lock when it does (see Pipeline.recycle). A renewal in flight notes the gen
	// of each lease it sends, and leaves a lease whose gen moved since untouched:
	// its answer is about the earlier claim.
	gen uint64
}

// epoch anchors mono: a monotonic clock in nanoseconds, cheaper to keep per
// attempt than a time.Time.
var epoch = time.Now()

func mono(t time.Time) int64 { return int64(t.Sub(epoch)) }

// monoNow is mono(time.Now()), read from the monotonic clock alone (time.Since
// skips the wall clock time.Now also reads: about half the cost).
func monoNow() int64 { return int64(time.Since(epoch)) }

// cancel cancels the handler's context with cause.
func (l *lease) cancel(cause error) { l.ctx.cancel(cause) }

func (l *lease) owned() Owned {
	return Owned{Key: l.claim.Key, Owner: l.claim.Owner, Ref: l.claim.Ref, Fence: l.claim.Fence}
}

// newKeeper returns a keeper for store's claims. ctx's values reach the store; its
// cancellation does not stop renewals (stop does).
func newKeeper(ctx context.Context, store Store, s Settings) *keeper {
	k := &keeper{store: store, s: s, lease: s.Lease, margin: LeaseMargin(s.Lease), interval: s.Lease / 3}
	k.bound = min(k.interval, s.CallTimeout)
	ctx = context.WithoutCancel(ctx)
	k.tickFn = func() { k.tick(ctx) }
	return k
}

// addAll keeps the n leases lease(i), whose renewed and deadline the caller set
// (see LeaseMargin).
func (k *keeper) addAll(n int, lease func(i int) *lease) {
	now := monoNow()
	k.mu.Lock()
	defer k.mu.Unlock()
	for i := range n {
		k.addLocked(lease(i), now)
	}
}

// addLeases keeps ls, claimed by one call sent at sent, ls[i] granted granted[i].
func (k *keeper) addLeases(ls []*lease, sent time.Time, granted []time.Duration) {
	renewed := mono(sent)
	for i, l := range ls {
		l.renewed = renewed
		l.deadline = renewed + int64(granted[i]-k.margin)
	}
	now := monoNow()
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, l := range ls {
		k.addLocked(l, now)
	}
}

func (k *keeper) addLocked(l *lease, now int64) {
	if k.stopped || l.done {
		return
	}
	k.leases = append(k.leases, l)
	l.slot = len(k.leases)
	if k.renew == nil {
		k.renew = time.AfterFunc(k.interval, k.tickFn)
	}
	// A full lease's deadline comes after the next renewal (lease/3 < lease -
	// margin), which arms the guard: attempts that settle sooner cost no guard. A
	// claim granted less (its own claim, asked again late) is guarded now.
	if l.deadline < now+int64(k.interval) {
		k.armGuard(now)
	}
}

// dropLocked removes l from the kept leases, if it is there. k.mu is held.
func (k *keeper) dropLocked(l *lease) {
	if l.slot == 0 {
		return
	}
	i, last := l.slot-1, len(k.leases)-1
	if i != last {
		k.leases[i] = k.leases[last]
		k.leases[i].slot = i + 1
	}
	k.leases[last] = nil
	k.leases = k.leases[:last]
	l.slot = 0
}

func (k *keeper) tick(ctx context.Context) {
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		return
	}
	k.wg.Add(1)
	defer k.wg.Done()
	// Every kept lease is unsettled (finish drops it), so its message is not
	// reused while k.mu is held: what is sent, and each lease's gen, are read now.
	live, owned, gens := make([]*lease, 0, len(k.leases)), make([]Owned, 0, len(k.leases)), make([]uint64, 0, len(k.leases))
	for _, l := range k.leases {
		if l.lost == nil {
			live, owned, gens = append(live, l), append(owned, l.owned()), append(gens, l.gen)
		}
	}
	k.armGuard(monoNow())
	k.mu.Unlock()

	next := k.interval
	if len(live) > 0 {
		sent := monoNow()
		cctx, cancel := context.WithTimeout(ctx, k.bound)
		errs := k.store.Extend(cctx, owned)
		cancel()
		if k.s.watchLeases() {
			e := LeaseEvent{Scope: k.s.Scope, Messages: len(owned), Latency: time.Duration(monoNow() - sent)}
			for _, h := range k.s.hooked().lease {
				h.OnLeaseRenewed(e)
			}
		}
		k.mu.Lock()
		for n, l := range live {
			var err error
			if n < len(errs) {
				err = errs[n]
			} else {
				err = &StoreError{Op: "extend", Err: errors.New("the store answered fewer items than it was sent")}
			}
			switch {
			case l.gen != gens[n]: // settled, and its memory reused since: not this call's
			case l.done || l.lost != nil:
			case err == nil:
				if dl := sent + int64(k.lease-k.margin); dl > l.deadline {
					l.deadline, l.renewed = dl, sent
				}
			case errors.Is(err, ErrLeaseLost):
				k.lose(l, "another owner took the claim over (renewal refused)")
			case errors.Is(err, ErrStoreUnavailable):
				next = max(k.interval/4, time.Millisecond) // try again well before the deadline
			default:
				k.lose(l, err.Error())
			}
		}
		k.armGuard(monoNow())
		k.mu.Unlock()
	}

	k.mu.Lock()
	if !k.stopped {
		k.renew.Reset(next)
	}
	k.mu.Unlock()
}

// expire cancels every live attempt whose deadline has passed.
func (k *keeper) expire() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return
	}
	now := monoNow()
	for _, l := range k.leases {
		if !l.done && l.lost == nil && now >= l.deadline {
			k.lose(l, fmt.Sprintf("the lease was not renewed in time: last renewal sent %v ago, lease %v, margin %v",
				time.Duration(now-l.renewed).Round(time.Millisecond), k.lease, k.margin))
		}
	}
	k.armGuard(now)
}

// armGuard sets the guard to the earliest deadline of a live attempt. k.mu is held.
func (k *keeper) armGuard(now int64) {
	first, any := int64(0), false
	for _, l := range k.leases {
		if !l.done && l.lost == nil && (!any || l.deadline < first) {
			first, any = l.deadline, true
		}
	}
	switch {
	case !any && k.guard != nil:
		k.guard.Stop()
	case !any:
	case k.guard == nil:
		k.guard = time.AfterFunc(time.Duration(max(first-now, 0)), k.expire)
	default:
		k.guard.Reset(time.Duration(max(first-now, 0)))
	}
}

// lose marks l lost and cancels its handler. k.mu is held.
func (k *keeper) lose(l *lease, reason string) {
	l.lost = &LeaseLostError{Key: l.claim.Key, Fence: l.claim.Fence, Reason: reason}
	l.cancel(l.lost)
	if k.s.watchLeases() {
		e := LeaseEvent{Scope: k.s.Scope, Key: l.claim.Key, Fence: l.claim.Fence, Reason: reason}
		for _, h := range k.s.hooked().lease {
			h.OnLeaseLost(e)
		}
	}
}

// finish stops renewing and guarding l (it is settled) and reports whether it was
// lost first.
func (k *keeper) finish(l *lease) *LeaseLostError {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.finishLocked(l)
	return l.lost
}

// finishLocked is finish with k.mu held. Once finished, a lease is never written
// by the keeper again: its lost is final.
func (k *keeper) finishLocked(l *lease) {
	l.done = true
	k.dropLocked(l)
}

// liveLocked is live at now with k.mu held.
func (k *keeper) liveLocked(l *lease, now int64) bool {
	return l.lost == nil && now < l.deadline
}

// lostErr reports whether l was lost.
func (k *keeper) lostErr(l *lease) *LeaseLostError {
	k.mu.Lock()
	defer k.mu.Unlock()
	return l.lost
}

// stop ends the renewals and the guard, and waits for a renewal in flight (each is
// bounded). Leases still kept are no longer renewed.
func (k *keeper) stop() {
	k.mu.Lock()
	k.stopped = true
	if k.renew != nil {
		k.renew.Stop()
	}
	if k.guard != nil {
		k.guard.Stop()
	}
	k.mu.Unlock()
	k.wg.Wait()
}
