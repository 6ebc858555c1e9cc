package consumer

import (
	"context"
	"fmt"
)

// Locker holds a distributed lock around a handler, for jobs that run minutes or
// hours (see WithLock). Package lock implements it on redsync.
type Locker interface {
	// TryAcquire takes the lock called name. On success, held is a context that
	// is cancelled (with the reason as its cause) the moment the lock is lost, and
	// release gives the lock back. acquired is false, with a nil error, when
	// another holder has the lock; err says the lock could not be decided (its
	// nodes are unreachable).
	TryAcquire(ctx context.Context, name string) (held context.Context, release func(), acquired bool, err error)
}

// WithLock runs every handler under a distributed lock named after its key. The
// lock expires within seconds of its holder's death, much sooner than the record
// lease: a caller that takes the lock knows the previous owner is gone and takes
// its started record over at once (fence +1) instead of waiting out the lease. A
// paused holder that wakes up finds its handler's context cancelled, and its
// completion refused (ErrLeaseLost). When another holder has the lock the result
// is IN_PROGRESS (or DUPLICATE once it is done). With a locker, batches run item
// by item. Default: no lock.
func WithLock(l Locker) Option { return optFunc(func(s *Settings) { s.Locker = l }) }

// LockName is the name of key's lock: <prefix>:{<scope>:<key>}:lock.
func (s Settings) LockName(key Key) string {
	return s.Prefix + ":{" + s.Scope + ":" + string(key) + "}:lock"
}

// executeLocked runs items one by one, each under its key's lock.
func executeLocked[T any](ctx context.Context, store Store, s Settings, items []BatchItem, fn BatchHandler[T], bc batchConfig) []Result[T] {
	out := make([]Result[T], len(items))
	stopped := false
	for i, it := range items {
		one := func(ctx context.Context, _ int, it BatchItem) (T, error) { return fn(ctx, i, it) }
		single := []BatchItem{it}
		switch {
		case stopped || ctx.Err() != nil:
			out[i] = Result[T]{Outcome: Error, Key: it.Key, Err: fmt.Errorf("%w: %v", ErrNotRun, notRunReason(ctx))}
			continue
		case it.Key.Validate() != nil:
			out[i] = Result[T]{Outcome: Error, Key: it.Key, Err: it.Key.Validate()}
		default:
			held, release, ok, err := s.Locker.TryAcquire(ctx, s.LockName(it.Key))
			switch {
			case err != nil:
				out[i] = Result[T]{Outcome: Error, Key: it.Key, Err: &StoreError{Op: "lock", Err: err}}
			case !ok: // another holder runs it: report what the record says, run nothing
				out[i] = execute(ctx, store, single, one, batchConfig{locked: true, probe: true})[0]
			default:
				out[i] = execute(held, store, single, one, batchConfig{locked: true, force: true})[0]
				if cause := context.Cause(held); cause != nil && ctx.Err() == nil {
					s.Logger.Warn("consumer: the lock was lost while the handler ran", "key", string(it.Key),
						"cause", cause, "outcome", out[i].Outcome)
				}
				release()
			}
		}
		if bc.stopOnFail && out[i].Action() != Settle {
			stopped = true
		}
	}
	return out
}

func notRunReason(ctx context.Context) any {
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return "an earlier item of the batch was not settled"
}
