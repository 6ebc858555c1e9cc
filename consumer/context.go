package consumer

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit/internal/observe"
)

// Info describes the attempt a handler runs in.
type Info struct {
	Key     Key
	Scope   string
	Attempt int   // 1 for the first attempt; takeovers and retries count up
	Fence   int64 // strictly larger for every later claim of the same record
	// Unguarded: WithFailOpen ran this handler without a claim (the store was down);
	// Attempt and Fence are 0.
	Unguarded bool
}

type infoKey struct{}

func withInfo(ctx context.Context, in Info) context.Context {
	return context.WithValue(ctx, infoKey{}, in)
}

// InfoFromContext returns the attempt's key, attempt number and fence, inside a handler.
func InfoFromContext(ctx context.Context) (Info, bool) {
	switch in := ctx.Value(infoKey{}).(type) {
	case *Info:
		return *in, true
	case Info:
		return in, true
	}
	return Info{}, false
}

// itemCtx is a claimed attempt's handler context: a cancellable child of the
// context the attempt was claimed under (its parent), cancelled with a
// *LeaseLostError cause when the lease is lost, that also answers the attempt's
// Info. A batch allocates its items' itemCtx values in one slice, so the Info costs
// no allocation of its own.
//
// It behaves as context.WithCancelCause(parent) does, but costs nothing more until
// something waits on it: its Done channel, and the real child of parent behind
// it, are made when Done is first called (also by a context derived from it) or
// when it is cancelled with a cause other than context.Canceled. Until then Err
// and Value ask the parent, and a cancellation with context.Canceled (how every
// attempt's context ends once it is settled) only sets a flag. Most handlers that
// never look at Done (and every quick one) thus cost neither the child's
// allocations nor its registration with the parent.
type itemCtx struct {
	parent context.Context
	// real is context.WithCancelCause(parent) once made (see Done); cancelReal cancels it.
	real       context.Context
	cancelReal context.CancelCauseFunc
	mu         sync.Mutex  // guards real, cancelReal and cancelled
	cancelled  bool        // cancelled with context.Canceled while real was not made
	completed  atomic.Bool // MarkCompleted was called
	info       Info
}

// plainCtx is an itemCtx as the bare cancellable child of its parent, without the
// attempt's Info: the context the engine itself uses for the attempt (its store
// calls, its observers' view of where the message came from).
type plainCtx itemCtx

// init makes c a fresh child of parent. c must be zero (a new itemCtx).
func (c *itemCtx) init(parent context.Context) { c.parent = parent }

// plain is c as its plain cancellable child (see plainCtx).
func (c *itemCtx) plain() *plainCtx { return (*plainCtx)(c) }

// closedDone is the Done channel of a context cancelled before its channel was made.
var closedDone = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// cancelCtxKey is the key context.Cause looks a cancelled context's cause up with
// (an address inside package context), found once by asking context.Cause
// itself and checked against a real cancellable context; nil if not found. With
// it, a context cancelled by a flag answers that key with nil, so that
// context.Cause reports context.Canceled (its own cause) rather than a cause its
// parent may get later; without it, every cancellation makes the real child.
var cancelCtxKey = func() any {
	p := &causeKeyProbe{Context: context.Background()}
	_ = context.Cause(p)
	cc, cancel := context.WithCancel(context.Background())
	defer cancel()
	if p.key == nil || cc.Value(p.key) != any(cc) {
		return nil
	}
	return p.key
}()

// causeKeyProbe is a cancelled context that keeps the first key it is asked for.
type causeKeyProbe struct {
	context.Context
	key any
}

func (p *causeKeyProbe) Err() error { return context.Canceled }

func (p *causeKeyProbe) Value(key any) any {
	if p.key == nil {
		p.key = key
	}
	return nil
}

// Deadline is the parent's.
func (c *plainCtx) Deadline() (time.Time, bool) { return c.parent.Deadline() }

// Done makes the real child, unless c was cancelled first, and returns its channel.
func (c *plainCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.real == nil {
		if c.cancelled {
			return closedDone
		}
		c.real, c.cancelReal = context.WithCancelCause(c.parent)
	}
	return c.real.Done()
}

// Err is the real child's, or context.Canceled after a cancellation by flag, or
// else the parent's.
func (c *plainCtx) Err() error {
	c.mu.Lock()
	real, cancelled := c.real, c.cancelled
	c.mu.Unlock()
	switch {
	case real != nil:
		return real.Err()
	case cancelled:
		return context.Canceled
	}
	return c.parent.Err()
}

// Value asks the real child, or else the parent (see cancelCtxKey).
func (c *plainCtx) Value(key any) any {
	c.mu.Lock()
	real, cancelled := c.real, c.cancelled
	c.mu.Unlock()
	switch {
	case real != nil:
		return real.Value(key)
	case cancelled && key == cancelCtxKey:
		return nil
	}
	return c.parent.Value(key)
}

// cause is context.Cause(c.plain()), read under one lock: the real child's
// cause, or context.Canceled after a cancellation by flag, or else the parent's.
func (c *itemCtx) cause() error {
	c.mu.Lock()
	real, cancelled := c.real, c.cancelled
	c.mu.Unlock()
	switch {
	case real != nil:
		return context.Cause(real)
	case cancelled:
		return context.Canceled
	}
	return context.Cause(c.parent)
}

// cancel cancels c with cause (context.Canceled when nil), as the cancel function
// of context.WithCancelCause does: a context already cancelled, or whose parent
// ended first, keeps what it has.
func (c *itemCtx) cancel(cause error) {
	if cause == nil {
		cause = context.Canceled
	}
	c.mu.Lock()
	if c.real == nil {
		if c.cancelled || c.parent.Err() != nil {
			c.mu.Unlock()
			return
		}
		if cause == context.Canceled && cancelCtxKey != nil {
			c.cancelled = true
			c.mu.Unlock()
			return
		}
		c.real, c.cancelReal = context.WithCancelCause(c.parent)
	}
	cancelReal := c.cancelReal
	c.mu.Unlock()
	cancelReal(cause)
}

// Deadline, Done and Err are those of the plain child.
func (c *itemCtx) Deadline() (time.Time, bool) { return c.plain().Deadline() }
func (c *itemCtx) Done() <-chan struct{}       { return c.plain().Done() }
func (c *itemCtx) Err() error                  { return c.plain().Err() }

type attemptKey struct{}

// Value answers the attempt's Info, and asks the plain child for anything else but
// the source it was claimed under (an entry point's name for itself), which is the
// execution's, not that of the executions the handler starts.
func (c *itemCtx) Value(key any) any {
	switch key.(type) {
	case infoKey:
		return &c.info
	case attemptKey:
		return c
	case observe.SourceKey:
		return nil
	}
	return c.plain().Value(key)
}

// MarkCompleted tells the execution running the handler of ctx that the handler
// has recorded its key's completion itself, in the store, as part of its own work
// (a transactional completion committed with the effect: package store/postgres).
// The execution then does not settle the attempt again: its outcome is SUCCESS
// with the handler's value. It reports false, and changes nothing, when ctx is not
// a handler's context. Handlers rarely call it directly.
func MarkCompleted(ctx context.Context) bool {
	c, ok := ctx.Value(attemptKey{}).(*itemCtx)
	if ok {
		c.completed.Store(true)
	}
	return ok
}

// FenceFromContext returns the attempt's fence, inside a handler. Pass it to a store
// that rejects stale writers (UPDATE ... SET fence = $1 WHERE id = $2 AND fence < $1),
// so a worker whose claim was taken over cannot overwrite its successor's work.
func FenceFromContext(ctx context.Context) (int64, bool) {
	in, ok := InfoFromContext(ctx)
	return in.Fence, ok && !in.Unguarded
}
