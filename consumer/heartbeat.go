package consumer

import (
	"context"
	"errors"
	"sync"
	"time"
)

// heartbeat renews the leases of running attempts every lease/3 until stopped. An
// attempt whose claim was taken over, or whose lease could not be renewed for a
// whole lease period, is marked lost and its handler's context is cancelled with a
// *LeaseLostError as the cause. It runs on a timer, so a handler that returns
// within lease/3 costs no goroutine at all.
type heartbeat struct {
	store    Store
	lease    time.Duration
	interval time.Duration

	mu      sync.Mutex
	stopped bool
	timer   *time.Timer
	wg      sync.WaitGroup
	items   []*beat
}

// beat is one attempt under the heartbeat.
type beat struct {
	owned  Owned
	cancel context.CancelCauseFunc
	lastOK time.Time // last time the lease was known to be renewed (or granted)
	lost   *LeaseLostError
	done   bool // settled: no longer renewed
}

// startHeartbeat starts renewing items. ctx's values reach the store; its
// cancellation does not stop renewals (stop does).
func startHeartbeat(ctx context.Context, store Store, lease time.Duration, items []*beat) *heartbeat {
	h := &heartbeat{store: store, lease: lease, interval: lease / 3, items: items}
	ctx = context.WithoutCancel(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.timer = time.AfterFunc(h.interval, func() { h.tick(ctx) })
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

	if len(live) > 0 {
		owned := make([]Owned, len(live))
		for i, b := range live {
			owned[i] = b.owned
		}
		cctx, cancel := context.WithTimeout(ctx, h.interval)
		errs := h.store.Extend(cctx, owned)
		cancel()
		now := time.Now()
		h.mu.Lock()
		for i, b := range live {
			switch err := errs[i]; {
			case b.done:
			case err == nil:
				b.lastOK = now
			case errors.Is(err, ErrStoreUnavailable):
				if now.Sub(b.lastOK) >= h.lease {
					h.lose(b, "the lease could not be renewed for a whole lease period: "+err.Error())
				}
			case errors.Is(err, ErrLeaseLost):
				h.lose(b, "another owner took the claim over (renewal refused)")
			default:
				h.lose(b, err.Error())
			}
		}
		h.mu.Unlock()
	}

	h.mu.Lock()
	if !h.stopped {
		h.timer.Reset(h.interval)
	}
	h.mu.Unlock()
}

// lose marks b lost and cancels its handler. h.mu is held.
func (h *heartbeat) lose(b *beat, reason string) {
	b.lost = &LeaseLostError{Key: b.owned.Key, Fence: b.owned.Fence, Reason: reason}
	b.cancel(b.lost)
}

// finish stops renewing b (it is settled) and reports whether it was lost first.
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

// stop ends the renewals and waits for one in flight.
func (h *heartbeat) stop() {
	h.mu.Lock()
	h.stopped = true
	h.timer.Stop()
	h.mu.Unlock()
	h.wg.Wait()
}
