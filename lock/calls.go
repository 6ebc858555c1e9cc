package lock

import (
	"context"
	"crypto/rand"
	"errors"
	"time"

	"github.com/go-redsync/redsync/v4"
)

// Every call to the nodes runs in a goroutine of its own and is waited for at
// most a bound the library sets, whatever the client does with the context:
// go-redis ignores context deadlines on socket I/O unless
// Options.ContextTimeoutEnabled is set, so a call to a partitioned node can
// otherwise hang for its read timeout (3s by default) or for ever. A call the
// library stops waiting for finishes in the background when the client returns.

// errNoAnswer: an attempt got no decision within its bound.
var errNoAnswer = errors.New("no decision from the nodes in time")

// callBound is how long the library waits for one acquisition attempt or one
// extension.
func (l *Locker) callBound() time.Duration { return l.cfg.expiry / 4 }

// margin is how long before a lock runs out on its nodes its holder's context is
// cancelled: a clock drift allowance (expiry/100, redsync's drift factor, plus
// 2ms) and expiry/10 for the job to see the cancellation and stop.
func margin(expiry time.Duration) time.Duration {
	return expiry/100 + 2*time.Millisecond + expiry/10
}

// deadline is the local end of a lock whose last successful acquisition or
// extension was sent at sent. redsync's Until() is sent + expiry - expiry/100;
// the deadline is that minus expiry/10 + 2ms.
func (l *Locker) deadline(sent time.Time) time.Time {
	return sent.Add(l.cfg.expiry - margin(l.cfg.expiry))
}

// mutex is a redsync mutex for one call on name with the holder's value. Each
// call gets its own, so a call left running in the background shares no state
// with the next one. redsync bounds each phase of an acquisition (the set, and
// the undo when it fails) by its timeout factor, expiry/20, through the context:
// clients that honour the context stop there, well within the library's bound.
func (l *Locker) mutex(name, value string) *redsync.Mutex {
	return l.rs.NewMutex(name,
		redsync.WithExpiry(l.cfg.expiry),
		redsync.WithTries(1),
		redsync.WithFailFast(true),
		redsync.WithGenValueFunc(func() (string, error) { return value, nil }),
		redsync.WithValue(value),
	)
}

// lockOnce makes one acquisition attempt and waits for it at most callBound, or
// until ctx ends. An attempt it stops waiting for goes on in the background, and
// when it returns whatever it took is unlocked: an abandoned attempt that
// succeeds late leaves no lock behind (a node that never answers again lets the
// key expire by itself).
func (l *Locker) lockOnce(ctx context.Context, name string) (value string, sent time.Time, err error) {
	value = rand.Text()
	m := l.mutex(name, value)
	result := make(chan error) // unbuffered: taking the result is taking the lock
	abandoned := make(chan struct{})
	base := context.WithoutCancel(ctx)
	sent = time.Now()
	go func() {
		err := m.LockContext(base)
		select {
		case result <- err:
			return
		case <-abandoned:
		}
		// Nobody holds this attempt: undo it, whatever it returned (redsync's
		// own undo may have run on an expired context). Past the expiry there
		// is nothing left to undo.
		uctx, cancel := context.WithTimeout(base, l.cfg.expiry)
		defer cancel()
		if ok, uerr := m.UnlockContext(uctx); ok {
			l.cfg.logger.Debug("lock: removed the lock an abandoned acquisition took", "name", name)
		} else if err == nil {
			l.cfg.logger.Warn("lock: an abandoned acquisition took the lock and could not remove it; it expires by itself",
				"name", name, "expiry", l.cfg.expiry, "err", uerr)
		}
	}()
	t := time.NewTimer(l.callBound())
	defer t.Stop()
	select {
	case err := <-result:
		return value, sent, err
	case <-t.C:
		close(abandoned)
		return "", sent, errNoAnswer
	case <-ctx.Done():
		close(abandoned)
		return "", sent, context.Cause(ctx)
	}
}

// extension is the answer to one extension call; err is nil when it succeeded.
type extension struct {
	sent time.Time
	err  error
}

// extendAsync starts one extension call; its answer arrives on the returned
// channel (buffered: a caller that stops waiting leaks nothing).
func (l *Locker) extendAsync(ctx context.Context, name, value string) <-chan extension {
	ch := make(chan extension, 1)
	m := l.mutex(name, value)
	go func() {
		cctx, cancel := context.WithTimeout(ctx, l.callBound())
		defer cancel()
		sent := time.Now()
		ok, err := m.ExtendContext(cctx)
		switch {
		case ok:
			err = nil
		case err == nil:
			err = redsync.ErrExtendFailed
		}
		ch <- extension{sent: sent, err: err}
	}()
	return ch
}

// unlock removes the holder's lock, waiting at most the unlock timeout.
func (l *Locker) unlock(ctx context.Context, name, value string) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The caller waits at most the unlock timeout; a late unlock still
		// helps until the lock would have expired.
		uctx, cancel := context.WithTimeout(ctx, max(l.cfg.unlockTimeout, l.cfg.expiry))
		defer cancel()
		if ok, err := l.mutex(name, value).UnlockContext(uctx); !ok {
			l.cfg.logger.Debug("lock: unlock found no quorum (expired or lost)", "name", name, "err", err)
		}
	}()
	t := time.NewTimer(l.cfg.unlockTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		l.cfg.logger.Warn("lock: unlock got no answer in time; the lock expires by itself", "name", name,
			"timeout", l.cfg.unlockTimeout, "expiry", l.cfg.expiry)
	}
}

// taken reports whether a quorum of nodes answered that the lock is not the
// caller's: another holder has it, or it expired there.
func taken(err error) bool {
	var te *redsync.ErrTaken
	return errors.As(err, &te)
}

// unreachable counts the nodes that failed with an error rather than answering.
func unreachable(err error) int {
	n := 0
	var walk func(error)
	walk = func(err error) {
		var re *redsync.RedisError
		switch {
		case err == nil:
		case errors.As(err, &re) && !isJoin(err):
			n++
		default:
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				for _, e := range j.Unwrap() {
					walk(e)
				}
			}
		}
	}
	walk(err)
	return n
}

func isJoin(err error) bool {
	_, ok := err.(interface{ Unwrap() []error })
	return ok
}
