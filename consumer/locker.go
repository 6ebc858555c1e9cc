package consumer

import (
	"context"
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
// lease: a caller that takes the lock knows the previous holder is gone and takes
// a started record that was claimed under the lock over at once (fence +1)
// instead of waiting out the lease. A record claimed without the lock (by a
// worker configured without WithLock, during a rolling deploy) is never forced:
// its owner may be alive, so its lease is waited out. A paused holder that wakes
// up finds its handler's context cancelled, and its completion refused
// (ErrLeaseLost). When another holder has the lock, the record is only read
// (nothing is claimed, no attempt is spent) and the result is IN_PROGRESS, or
// DUPLICATE once it is done. With a locker, batches run item by item. Default: no
// lock.
func WithLock(l Locker) Option { return optFunc(func(s *Settings) { s.Locker = l }) }

// LockName is the name of key's lock: <prefix>:{<scope>:<key>}:lock.
func (s Settings) LockName(key Key) string {
	return s.Prefix + ":{" + s.Scope + ":" + string(key) + "}:lock"
}

// runLocked runs the items one by one, each under its key's lock.
func (b *batch[T]) runLocked(ctx context.Context) {
	stopped := false
	for i, it := range b.items {
		switch {
		case stopped || ctx.Err() != nil:
			b.out[i] = Result[T]{Outcome: Error, Key: it.Key, Err: notRunError(context.Cause(ctx))}
			continue
		case it.Key.Validate() != nil:
			b.out[i] = Result[T]{Outcome: Error, Key: it.Key, Err: it.Key.Validate()}
		default:
			held, release, ok, err := b.s.Locker.TryAcquire(ctx, b.s.LockName(it.Key))
			switch {
			case err != nil:
				b.out[i] = Result[T]{Outcome: Error, Key: it.Key, Err: &StoreError{Op: "lock", Err: err}}
			case !ok: // another holder runs it: report what the record says, change nothing
				b.out[i] = probe[T](ctx, b.store, b.s, it)
			default:
				b.out[i] = b.oneLocked(ctx, held, release, i)
			}
		}
		if b.bc.stopOnFail && b.out[i].Action() != Ack {
			stopped = true
		}
	}
}

// oneLocked runs item i under its held lock and always releases the lock.
func (b *batch[T]) oneLocked(ctx, held context.Context, release func(), i int) Result[T] {
	defer release()
	fn := func(ctx context.Context, _ int, it BatchItem) (T, error) { return b.fn(ctx, i, it) }
	r := execute(held, b.store, b.items[i:i+1], fn, batchConfig{locked: true, underLock: true})[0]
	if cause := context.Cause(held); cause != nil && ctx.Err() == nil {
		b.s.Logger.Warn("consumer: the lock was lost while the handler ran", "key", string(b.items[i].Key),
			"cause", cause, "outcome", r.Outcome)
	}
	return r
}

// probe reports what the record of it says without claiming it: the lock is held
// elsewhere, so this delivery must not run, and must not spend an attempt either.
func probe[T any](ctx context.Context, store Store, s Settings, it BatchItem) Result[T] {
	pctx, cancel := context.WithTimeout(ctx, s.CallTimeout)
	rec, err := store.Peek(pctx, it.Key)
	cancel()
	if err != nil {
		return Result[T]{Outcome: Error, Key: it.Key, Err: err}
	}
	rep := ClaimReply{Status: StatusInProgress, Fence: rec.Fence, Attempts: rec.Attempts}
	switch {
	case !rec.Found: // the holder has not claimed it yet
	case s.Fingerprint && !rec.Fingerprint.IsZero() && rec.Fingerprint != FingerprintOf(it.Payload):
		rep.Status = StatusConflict
	case rec.State == "completed":
		rep.Status, rep.Result, rep.Dropped = StatusCompleted, rec.Result, rec.Dropped
	case rec.State == "failed":
		rep.Status, rep.Message, rep.Permanent = StatusFailed, rec.Error, rec.Permanent
	case rec.State == "started" && rec.LeaseUntil.After(rec.Now):
		rep.Lease = rec.LeaseUntil.Sub(rec.Now)
	}
	return resolve[T](s, it.Key, rep)
}
