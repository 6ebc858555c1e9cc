package lock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"
)

// Errors; match them with errors.Is.
var (
	// ErrNotAcquired: another holder has the lock (after every try).
	ErrNotAcquired = errors.New("lock: not acquired: held elsewhere")
	// ErrLost: the lock was lost while the job ran; its context was cancelled.
	ErrLost = errors.New("lock: lost while running")
	// ErrUnreachable: too few nodes answered for a quorum.
	ErrUnreachable = errors.New("lock: nodes unreachable")
	// ErrConfig: New was given a bad option; the message says what to fix.
	ErrConfig = errors.New("lock: invalid configuration")
)

// LostError says why a held lock was lost. It matches ErrLost; it is the cause of
// the job's context (context.Cause) and, wrapped with the job's own error, what Do
// returns.
type LostError struct {
	Name   string
	Reason string
	Err    error // the job's error, if any (set by Do)
}

func (e *LostError) Error() string {
	msg := fmt.Sprintf("lock: %q lost while running: %s", e.Name, e.Reason)
	if e.Err != nil {
		msg += " (job: " + e.Err.Error() + ")"
	}
	return msg
}

// Unwrap matches ErrLost and the job's error.
func (e *LostError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrLost}
	}
	return []error{ErrLost, e.Err}
}

// UnreachableError: a lock could not be decided because too few nodes answered.
// It matches ErrUnreachable.
type UnreachableError struct {
	Name   string
	Down   int // nodes that failed to answer
	Nodes  int
	Quorum int
	Err    error // the nodes' errors
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("lock: %q: %d of %d nodes unreachable, a quorum needs %d: %v", e.Name, e.Down, e.Nodes, e.Quorum, e.Err)
}

// Unwrap matches ErrUnreachable and the nodes' errors.
func (e *UnreachableError) Unwrap() []error { return []error{ErrUnreachable, e.Err} }

// Option configures a Locker. Every option states its default.
type Option interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	expiry        time.Duration
	tries         int
	retryDelay    time.Duration
	unlockTimeout time.Duration
	onExtend      func(name string)
	logger        *slog.Logger
}

// WithExpiry sets how long a lock lives without extension; the watchdog extends it
// every expiry/3. A crashed holder's lock is free again after at most this long.
// Default 8s, minimum 30ms.
func WithExpiry(d time.Duration) Option { return optFunc(func(c *config) { c.expiry = d }) }

// WithTries sets how many times an acquisition tries while the lock is held
// elsewhere. Default 3.
func WithTries(n int) Option { return optFunc(func(c *config) { c.tries = n }) }

// WithRetryDelay sets the pause between tries (with jitter over its upper half).
// Default 200ms.
func WithRetryDelay(d time.Duration) Option { return optFunc(func(c *config) { c.retryDelay = d }) }

// WithUnlockTimeout bounds the unlock after a job. Default 2s.
func WithUnlockTimeout(d time.Duration) Option {
	return optFunc(func(c *config) { c.unlockTimeout = d })
}

// WithOnExtend calls fn after every successful extension (metrics, tests).
// Default none.
func WithOnExtend(fn func(name string)) Option { return optFunc(func(c *config) { c.onExtend = fn }) }

// WithLogger sets the logger. Default: logs are discarded.
func WithLogger(l *slog.Logger) Option { return optFunc(func(c *config) { c.logger = l }) }

// Locker takes locks on a fixed set of independent Redis nodes. It is safe for
// concurrent use.
type Locker struct {
	rs     *redsync.Redsync
	nodes  int
	quorum int
	cfg    config
}

// New returns a Locker over clients: one client per independent Redis node (not
// replicas of one node). With several nodes a lock needs a majority of them.
func New(clients []goredislib.UniversalClient, opts ...Option) (*Locker, error) {
	cfg := config{expiry: 8 * time.Second, tries: 3, retryDelay: 200 * time.Millisecond, unlockTimeout: 2 * time.Second}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", ErrConfig)
		}
		o.apply(&cfg)
	}
	switch {
	case len(clients) == 0:
		return nil, fmt.Errorf("%w: no Redis clients: give one per independent node", ErrConfig)
	case cfg.expiry < 30*time.Millisecond:
		return nil, fmt.Errorf("%w: WithExpiry(%v): give at least 30ms", ErrConfig, cfg.expiry)
	case cfg.tries < 1:
		return nil, fmt.Errorf("%w: WithTries(%d): give at least 1", ErrConfig, cfg.tries)
	case cfg.retryDelay <= 0 || cfg.unlockTimeout <= 0:
		return nil, fmt.Errorf("%w: WithRetryDelay and WithUnlockTimeout take a positive duration", ErrConfig)
	}
	if cfg.logger == nil {
		cfg.logger = slog.New(slog.DiscardHandler)
	}
	rp := make([]rsredis.Pool, len(clients))
	for i, c := range clients {
		if c == nil {
			return nil, fmt.Errorf("%w: client %d is nil", ErrConfig, i)
		}
		rp[i] = goredis.NewPool(c)
	}
	return &Locker{rs: redsync.New(rp...), nodes: len(clients), quorum: len(clients)/2 + 1, cfg: cfg}, nil
}

// Do runs fn under the lock called name. It acquires the lock (trying as
// WithTries says), extends it every expiry/3 while fn runs, cancels fn's context
// with a *LostError cause the moment an extension fails, and unlocks when fn
// returns. It returns fn's error, or a *LostError wrapping it when the lock was
// lost, or an acquisition error matching ErrNotAcquired or ErrUnreachable.
func (l *Locker) Do(ctx context.Context, name string, fn func(ctx context.Context) error) error {
	held, release, err := l.Acquire(ctx, name)
	if err != nil {
		return err
	}
	ferr := fn(held)
	var lost *LostError
	if errors.As(context.Cause(held), &lost) {
		release()
		return &LostError{Name: lost.Name, Reason: lost.Reason, Err: ferr}
	}
	release()
	return ferr
}

// TryAcquire implements consumer.Locker: acquired is false, with no error, when
// another holder has the lock.
func (l *Locker) TryAcquire(ctx context.Context, name string) (context.Context, func(), bool, error) {
	held, release, err := l.Acquire(ctx, name)
	switch {
	case err == nil:
		return held, release, true, nil
	case errors.Is(err, ErrNotAcquired):
		return nil, nil, false, nil
	}
	return nil, nil, false, err
}

// Acquire takes the lock called name and keeps it, from a watchdog, until release
// is called; held is cancelled with a *LostError cause if the lock is lost first.
// release is safe to call more than once.
func (l *Locker) Acquire(ctx context.Context, name string) (held context.Context, release func(), err error) {
	m := l.rs.NewMutex(name, redsync.WithExpiry(l.cfg.expiry), redsync.WithTries(1), redsync.WithFailFast(true))
	for try := 1; ; try++ {
		err := m.LockContext(ctx)
		if err == nil {
			break
		}
		if down := unreachable(err); down > l.nodes-l.quorum {
			return nil, nil, &UnreachableError{Name: name, Down: down, Nodes: l.nodes, Quorum: l.quorum, Err: err}
		}
		if cerr := ctx.Err(); cerr != nil {
			return nil, nil, fmt.Errorf("lock: %q: %w", name, cerr)
		}
		if try >= l.cfg.tries {
			return nil, nil, fmt.Errorf("%w: %q after %d tries: %v", ErrNotAcquired, name, try, err)
		}
		d := l.cfg.retryDelay
		t := time.NewTimer(d/2 + rand.N(d/2+1))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, nil, fmt.Errorf("lock: %q: %w", name, ctx.Err())
		}
	}
	held, cancel := context.WithCancelCause(ctx)
	w := &watchdog{l: l, m: m, name: name, cancel: cancel, stop: make(chan struct{}), done: make(chan struct{})}
	go w.run(context.WithoutCancel(ctx))
	var once sync.Once
	release = func() {
		once.Do(func() {
			close(w.stop)
			<-w.done
			cancel(nil)
			uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.unlockTimeout)
			defer ucancel()
			if ok, err := m.UnlockContext(uctx); !ok {
				l.cfg.logger.Debug("lock: unlock found no quorum (expired or lost)", "name", name, "err", err)
			}
		})
	}
	return held, release, nil
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

// watchdog extends a held lock every expiry/3 until stopped, and cancels the
// holder's context once the lock cannot be extended before it runs out.
type watchdog struct {
	l      *Locker
	m      *redsync.Mutex
	name   string
	cancel context.CancelCauseFunc
	stop   chan struct{}
	done   chan struct{}
}

func (w *watchdog) run(ctx context.Context) {
	defer close(w.done)
	every := w.l.cfg.expiry / 3
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		ectx, cancel := context.WithTimeout(ctx, every)
		ok, err := w.m.ExtendContext(ectx)
		cancel()
		switch {
		case ok:
			if w.l.cfg.onExtend != nil {
				w.l.cfg.onExtend(w.name)
			}
			t.Reset(every)
		case time.Now().Before(w.m.Until()):
			// Still valid for a while: try again soon.
			w.l.cfg.logger.Warn("lock: extension failed; retrying before the lock runs out", "name", w.name, "err", err)
			t.Reset(max(every/4, time.Millisecond))
		default:
			reason := "it could not be extended before it expired"
			if err != nil {
				reason += ": " + err.Error()
			}
			w.cancel(&LostError{Name: w.name, Reason: reason})
			return
		}
	}
}
