package lock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"
)

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
// Give the clients ContextTimeoutEnabled: true (see the package doc).
func New(clients []goredislib.UniversalClient, opts ...Option) (*Locker, error) {
	cfg := defaults()
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", ErrConfig)
		}
		o.apply(&cfg)
	}
	if len(clients) == 0 {
		return nil, fmt.Errorf("%w: no Redis clients: give one per independent node", ErrConfig)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
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
// with a *LostError cause when the lock is lost (at once when a quorum of nodes
// says another holder has it; otherwise at the local deadline, a margin before
// it runs out on the nodes), and unlocks when fn returns or panics (the panic
// then goes on). It returns fn's error, or a *LostError wrapping it when the lock
// was lost, or an acquisition error matching ErrNotAcquired or ErrUnreachable.
func (l *Locker) Do(ctx context.Context, name string, fn func(ctx context.Context) error) error {
	if fn == nil {
		return fmt.Errorf("%w: Do(%q): nil job", ErrConfig, name)
	}
	held, release, err := l.Acquire(ctx, name)
	if err != nil {
		return err
	}
	defer release()
	ferr := fn(held)
	var lost *LostError
	if errors.As(context.Cause(held), &lost) {
		return &LostError{Name: lost.Name, Reason: lost.Reason, Err: ferr}
	}
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
// Call release when done, also on panic (defer it); it is safe to call more than
// once and returns after at most the unlock timeout.
func (l *Locker) Acquire(ctx context.Context, name string) (held context.Context, release func(), err error) {
	switch {
	case l == nil || l.rs == nil:
		return nil, nil, fmt.Errorf("%w: nil Locker: build one with New", ErrConfig)
	case ctx == nil:
		return nil, nil, fmt.Errorf("%w: Acquire(%q): nil context", ErrConfig, name)
	case name == "":
		return nil, nil, fmt.Errorf("%w: empty lock name", ErrConfig)
	case ctx.Err() != nil:
		return nil, nil, fmt.Errorf("lock: %q: %w", name, ctx.Err())
	}
	var value string
	var sent time.Time
	for try := 1; ; try++ {
		value, sent, err = l.lockOnce(ctx, name)
		if err == nil {
			break
		}
		if errors.Is(err, errNoAnswer) {
			return nil, nil, &UnreachableError{Name: name, Down: l.nodes - l.quorum + 1, Nodes: l.nodes, Quorum: l.quorum,
				Err: fmt.Errorf("no decision within %v", l.callBound())}
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
	w := &watchdog{l: l, name: name, value: value, deadline: l.deadline(sent), cancel: cancel,
		stop: make(chan struct{}), done: make(chan struct{})}
	base := context.WithoutCancel(ctx)
	go w.run(base)
	var once sync.Once
	release = func() {
		once.Do(func() {
			close(w.stop)
			<-w.done
			cancel(nil)
			l.unlock(base, name, value)
		})
	}
	return held, release, nil
}
