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
	lease    time.Duration
	margin   time.Duration
	interval time.Duration
	bound    time.Duration // longest wait for one renewal call

	mu      sync.Mutex
	stopped bool
	renew   *time.Timer
	guard   *time.Timer
	wg      sync.WaitGroup // a renewal in flight
	items   []*beat
}

// beat is one attempt under the heartbeat.
type beat struct {
	owned    Owned
	cancel   context.CancelCauseFunc
	deadline time.Time // local deadline: see LeaseMargin
	renewed  time.Time // send time of the last successful claim or renewal
	lost     *LeaseLostError
	done     bool // settled: no longer renewed or guarded
}

// newBeat is an attempt whose claim call was sent at sent and granted lease (the
// lease left, for a claim that found its own owner token).
func newBeat(owned Owned, cancel context.CancelCauseFunc, sent time.Time, lease, margin time.Duration) *beat {
	return &beat{owned: owned, cancel: cancel, renewed: sent, deadline: sent.Add(lease - margin)}
}

// startHeartbeat starts renewing and guarding items. ctx's values reach the store;
// its cancellation does not stop renewals (stop does).
func startHeartbeat(ctx context.Context, store Store, s Settings, items []*beat) *heartbeat {
	h := &heartbeat{store: store, lease: s.Lease, margin: LeaseMargin(s.Lease), interval: s.Lease / 3, items: items}
	h.bound = min(h.interval, s.CallTimeout)
	ctx = context.WithoutCancel(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.renew = time.AfterFunc(h.interval, func() { h.tick(ctx) })
	h.guard = time.AfterFunc(time.Hour, h.expire)
	h.armGuard(time.Now())
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
	var live []*beat
	for _, b := range h.items {
		if !b.done && b.lost == nil {
			live = append(live, b)
		}
	}
	h.mu.Unlock()

	next := h.interval
	if len(live) > 0 {
		owned := make([]Owned, len(live))
		for i, b := range live {
			owned[i] = b.owned
		}
		sent := time.Now()
		cctx, cancel := context.WithTimeout(ctx, h.bound)
		errs := h.store.Extend(cctx, owned)
		cancel()
		h.mu.Lock()
		for i, b := range live {
			var err error
			if i < len(errs) {
				err = errs[i]
			} else {
				err = &StoreError{Op: "extend", Err: errors.New("the store answered fewer items than it was sent")}
			}
			switch {
			case b.done || b.lost != nil:
			case err == nil:
				if dl := sent.Add(h.lease - h.margin); dl.After(b.deadline) {
					b.deadline, b.renewed = dl, sent
				}
			case errors.Is(err, ErrLeaseLost):
				h.lose(b, "another owner took the claim over (renewal refused)")
			case errors.Is(err, ErrStoreUnavailable):
				next = max(h.interval/4, time.Millisecond) // try again well before the deadline
			default:
				h.lose(b, err.Error())
			}
		}
		h.armGuard(time.Now())
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
	now := time.Now()
	for _, b := range h.items {
		if !b.done && b.lost == nil && !now.Before(b.deadline) {
			h.lose(b, fmt.Sprintf("the lease was not renewed in time: last renewal sent %v ago, lease %v, margin %v",
				now.Sub(b.renewed).Round(time.Millisecond), h.lease, h.margin))
		}
	}
	h.armGuard(now)
}

// armGuard sets the guard to the earliest deadline of a live attempt. h.mu is held.
func (h *heartbeat) armGuard(now time.Time) {
	var first time.Time
	for _, b := range h.items {
		if !b.done && b.lost == nil && (first.IsZero() || b.deadline.Before(first)) {
			first = b.deadline
		}
	}
	if first.IsZero() {
		h.guard.Stop()
		return
	}
	h.guard.Reset(max(first.Sub(now), 0))
}

// lose marks b lost and cancels its handler. h.mu is held.
func (h *heartbeat) lose(b *beat, reason string) {
	b.lost = &LeaseLostError{Key: b.owned.Key, Fence: b.owned.Fence, Reason: reason}
	b.cancel(b.lost)
}

// finish stops renewing and guarding b (it is settled) and reports whether it was lost first.
func (h *heartbeat) finish(b *beat) *LeaseLostError {
	h.mu.Lock()
	defer h.mu.Unlock()
	b.done = true
	return b.lost
}

// lostErr reports whether b was lost.
func (h *heartbeat) lostErr(b *beat) *LeaseLostError {
	h.mu.Lock()
	defer h.mu.Unlock()
	return b.lost
}

// live reports whether b's local deadline is still ahead.
func (h *heartbeat) live(b *beat) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return b.lost == nil && time.Now().Before(b.deadline)
}

// stop ends the renewals and the guard, and waits for a renewal in flight (each is
// bounded).
func (h *heartbeat) stop() {
	h.mu.Lock()
	h.stopped = true
	h.renew.Stop()
	h.guard.Stop()
	h.mu.Unlock()
	h.wg.Wait()
}
