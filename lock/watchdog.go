package lock

import (
	"context"
	"fmt"
	"time"
)

// watchdog keeps a held lock: it extends it every expiry/3, and cancels the
// holder's context with a *LostError cause at once when a quorum of nodes
// answers that the lock is not the holder's, or when the local deadline passes
// without a successful extension, whether or not a call is in flight.
type watchdog struct {
	l        *Locker
	name     string
	value    string
	deadline time.Time // owned by run
	cancel   context.CancelCauseFunc
	stop     chan struct{} // closed by release
	done     chan struct{} // closed when run returns
}

func (w *watchdog) run(ctx context.Context) {
	defer close(w.done)
	cfg := w.l.cfg
	every := cfg.expiry / 3
	retry := max(every/4, time.Millisecond)
	bound := w.l.callBound()
	dead := time.NewTimer(time.Until(w.deadline))
	defer dead.Stop()
	next := time.NewTimer(every)
	defer next.Stop()
	wait := time.NewTimer(bound)
	wait.Stop()
	defer wait.Stop()
	var lastErr error
	for {
		select {
		case <-w.stop:
			return
		case <-dead.C:
			w.ranOut(lastErr)
			return
		case <-next.C:
		}
		answer := w.l.extendAsync(ctx, w.name, w.value)
		wait.Reset(bound)
		var r extension
		select {
		case <-w.stop:
			return
		case <-dead.C:
			w.ranOut(lastErr)
			return
		case <-wait.C:
			r.err = fmt.Errorf("no answer within %v", bound)
		case r = <-answer:
			wait.Stop()
		}
		switch {
		case r.err == nil:
			w.deadline = w.l.deadline(r.sent)
			dead.Reset(time.Until(w.deadline))
			lastErr = nil
			if cfg.onExtend != nil {
				cfg.onExtend(w.name)
			}
			next.Reset(every)
		case taken(r.err):
			w.cancel(&LostError{Name: w.name, Reason: "a quorum of its nodes answered that it is not this holder's " +
				"(another holder has it, or it expired there): " + r.err.Error()})
			return
		default:
			lastErr = r.err
			w.l.cfg.logger.Warn("lock: extension failed; retrying before the lock runs out", "name", w.name,
				"left", time.Until(w.deadline).Round(time.Millisecond), "err", r.err)
			next.Reset(min(retry, max(time.Until(w.deadline), 0)))
		}
	}
}

// ranOut cancels the holder: its local deadline passed without an extension.
func (w *watchdog) ranOut(lastErr error) {
	reason := fmt.Sprintf("no extension succeeded before its local deadline (%v before it runs out on the nodes)",
		margin(w.l.cfg.expiry))
	if lastErr != nil {
		reason += ": " + lastErr.Error()
	}
	w.cancel(&LostError{Name: w.name, Reason: reason})
}
