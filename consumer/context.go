package consumer

import (
	"context"
	"sync/atomic"

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
// batch's context (cancelled with a *LeaseLostError cause when the lease is lost)
// that also answers the attempt's Info. A batch allocates its items' itemCtx values
// in one slice, so the Info costs no allocation of its own.
type itemCtx struct {
	context.Context
	info      Info
	completed atomic.Bool // MarkCompleted was called
}

type attemptKey struct{}

// Value answers the attempt's Info, and asks the parent for anything else but
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
	return c.Context.Value(key)
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
