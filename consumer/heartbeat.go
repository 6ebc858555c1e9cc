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

// heartbeat keeps the claims of running attempts alive: it renews their leases
// every lease/3 (sooner after a failed renewal), and a guard timer cancels each
// attempt's handler at its local deadline (see LeaseMargin). An attempt whose
// renewal is refused (another owner took the claim over) is cancelled at once. It
// runs on timers, so a handler that returns within lease/3 costs no goroutine.
type heartbeat struct {
	store    Store
	owned    func(k int) Owned // attempt k's claim
	lease    time.Duration
	margin   time.Duration
	interval time.Duration
	bound    time.Duration // longest wait for one renewal call

	mu      sync.Mutex
	stopped bool
	renew   *time.Timer
	guard   *time.Timer
	wg      sync.WaitGroup // a renewal in flight
	items   []beat
}

// beat is one attempt under the heartbeat. Times are monotonic (see mono).
type beat struct {
	cancel   context.CancelCauseFunc
	deadline int64 // local deadline: see LeaseMargin
	renewed  int64 // send time of the last successful claim or renewal
	lost     *LeaseLostError
	done     bool // settled: no longer renewed or guarded
}

// epoch anchors mono: a monotonic clock in nanoseconds, cheaper to keep per
// attempt than a time.Time.
var epoch = time.Now()

func mono(t time.Time) int64 { return int64(t.Sub(epoch)) }

// newBeat is an attempt whose claim call was sent at sent and granted lease (the
// lease left, for a claim that found its own owner token).
func newBeat(cancel context.CancelCauseFunc, sent time.Time, lease, margin time.Duration) beat {
	return beat{cancel: cancel, renewed: mono(sent), deadline: mono(sent) + int64(lease-margin)}
}

// startHeartbeat starts renewing and guarding items, which it owns from now on
// (attempts refer to them by index; owned names attempt k's claim). ctx's values
// reach the store; its cancellation does not stop renewals (stop does).
func startHeartbeat(ctx context.Context, store Store, s Settings, items []beat, owned func(k int) Owned) *heartbeat {
	h := &heartbeat{store: store, owned: owned, lease: s.Lease, margin: LeaseMargin(s.Lease), interval: s.Lease / 3, items: items}
	h.bound = min(h.interval, s.CallTimeout)
	ctx = context.WithoutCancel(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.renew = time.AfterFunc(h.interval, func() { h.tick(ctx) })
	// A full lease's deadline comes after the first renewal (lease/3 < lease -
	// margin), and the guard is armed then: a handler that returns sooner costs one
	// timer. A claim granted less (its own claim, asked again late) is guarded now.
	now := mono(time.Now())
	for k := range h.items {
		if h.items[k].deadline < now+int64(h.interval) {
			h.guard = time.AfterFunc(time.Hour, h.expire)
			h.armGuard(now)
			break
		}
	}
	return h
}

func (h *heartbeat) tick(ctx context.Context) {
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	h.wg.Add(1)
	defer h.wg.Done()
	if h.guard == nil {
		h.guard = time.AfterFunc(time.Hour, h.expire)
		h.armGuard(mono(time.Now()))
	}
	var live []int
	for k := range h.items {
		if b := &h.items[k]; !b.done && b.lost == nil {
			live = append(live, k)
		}
	}
	h.mu.Unlock()

	next := h.interval
	if len(live) > 0 {
		owned := make([]Owned, len(live))
		for n, k := range live {
			owned[n] = h.owned(k)
		}
		sent := mono(time.Now())
		cctx, cancel := context.WithTimeout(ctx, h.bound)
		errs := h.store.Extend(cctx, owned)
		cancel()
		h.mu.Lock()
		for n, k := range live {
			b := &h.items[k]
			var err error
			if n < len(errs) {
				err = errs[n]
			} else {
				err = &StoreError{Op: "extend", Err: errors.New("the store answered fewer items than it was sent")}
			}
			switch {
			case b.done || b.lost != nil:
			case err == nil:
				if dl := sent + int64(h.lease-h.margin); dl > b.deadline {
					b.deadline, b.renewed = dl, sent
				}
			case errors.Is(err, ErrLeaseLost):
				h.lose(k, "another owner took the claim over (renewal refused)")
			case errors.Is(err, ErrStoreUnavailable):
				next = max(h.interval/4, time.Millisecond) // try again well before the deadline
			default:
				h.lose(k, err.Error())
			}
		}
		h.armGuard(mono(time.Now()))
		h.mu.Unlock()
	}

	h.mu.Lock()
	if !h.stopped {
		h.renew.Reset(next)
	}
	h.mu.Unlock()
}

// expire cancels every live attempt whose deadline has passed.
func (h *heartbeat) expire() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	now := mono(time.Now())
	for k := range h.items {
		if b := &h.items[k]; !b.done && b.lost == nil && now >= b.deadline {
			h.lose(k, fmt.Sprintf("the lease was not renewed in time: last renewal sent %v ago, lease %v, margin %v",
				time.Duration(now-b.renewed).Round(time.Millisecond), h.lease, h.margin))
		}
	}
	h.armGuard(now)
}

// armGuard sets the guard to the earliest deadline of a live attempt. h.mu is held.
func (h *heartbeat) armGuard(now int64) {
	first, any := int64(0), false
	for k := range h.items {
		if b := &h.items[k]; !b.done && b.lost == nil && (!any || b.deadline < first) {
			first, any = b.deadline, true
		}
	}
	if !any {
		h.guard.Stop()
		return
	}
	h.guard.Reset(time.Duration(max(first-now, 0)))
}

// lose marks attempt k lost and cancels its handler. h.mu is held.
func (h *heartbeat) lose(k int, reason string) {
	o := h.owned(k)
	b := &h.items[k]
	b.lost = &LeaseLostError{Key: o.Key, Fence: o.Fence, Reason: reason}
	b.cancel(b.lost)
}

// finish stops renewing and guarding attempt k (it is settled) and reports whether
// it was lost first.
func (h *heartbeat) finish(k int) *LeaseLostError {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.items[k].done = true
	return h.items[k].lost
}

// lostErr reports whether attempt k was lost.
func (h *heartbeat) lostErr(k int) *LeaseLostError {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.items[k].lost
}

// live reports whether attempt k's local deadline is still ahead.
func (h *heartbeat) live(k int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	b := &h.items[k]
	return b.lost == nil && mono(time.Now()) < b.deadline
}

// cancelAll cancels every attempt's handler context (the batch is over).
func (h *heartbeat) cancelAll() {
	for k := range h.items {
		h.items[k].cancel(context.Canceled)
	}
}

// stop ends the renewals and the guard, and waits for a renewal in flight (each is
// bounded).
func (h *heartbeat) stop() {
	h.mu.Lock()
	h.stopped = true
	h.renew.Stop()
	if h.guard != nil {
		h.guard.Stop()
	}
	h.mu.Unlock()
	h.wg.Wait()
}
