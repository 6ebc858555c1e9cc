package consumer

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// A handler's context (itemCtx) must behave exactly as context.WithCancelCause of
// its parent does, whatever the order of its own cancellation, its parent's, the
// first call to Done and the contexts derived from it. Each case runs its steps on
// both and compares what a handler can see after every step.
func TestItemCtxBehavesAsWithCancelCause(t *testing.T) {
	if cancelCtxKey == nil {
		t.Log("context.Cause's key was not found: every cancellation makes the real child")
	}
	lost := &LeaseLostError{Key: "k", Fence: 1, Reason: "test"}
	stop := ErrPipelineStopped
	why := errors.New("the caller's reason")
	// Steps: done (call Done), own:E (cancel the context with E, nil for nil),
	// parent:E (cancel the parent with E), derive (derive a context and an
	// AfterFunc from it; they are observed too).
	cases := [][]string{
		{},
		{"own:canceled"},
		{"own:nil"},
		{"own:lost"},
		{"own:lost", "own:stop"},
		{"own:canceled", "own:lost"},
		{"parent:why"},
		{"parent:canceled"},
		{"own:canceled", "parent:why"},
		{"own:lost", "parent:why"},
		{"parent:why", "own:lost"},
		{"parent:why", "own:canceled"},
		{"done", "own:canceled", "parent:why"},
		{"done", "own:lost"},
		{"done", "parent:why", "own:lost"},
		{"derive", "own:canceled", "parent:why"},
		{"derive", "own:lost", "derive"},
		{"derive", "parent:why", "derive", "own:lost"},
		{"own:canceled", "derive", "parent:why", "derive"},
		{"own:canceled", "done", "derive"},
		{"parent:why", "derive", "done"},
	}
	errs := map[string]error{"canceled": context.Canceled, "nil": nil, "lost": lost, "stop": stop, "why": why}
	for _, steps := range cases {
		for _, parentKind := range []string{"cancellable", "deadline", "without-cancel"} {
			t.Run(parentKind+"/"+strings.Join(steps, ","), func(t *testing.T) {
				want, got := newCtxPair(parentKind, func(p context.Context) (context.Context, context.CancelCauseFunc) {
					return context.WithCancelCause(p)
				}), newCtxPair(parentKind, func(p context.Context) (context.Context, context.CancelCauseFunc) {
					c := new(itemCtx)
					c.init(p)
					return c, c.cancel
				})
				defer want.close()
				defer got.close()
				for n, step := range steps {
					op, arg, _ := strings.Cut(step, ":")
					for _, c := range []*ctxPair{want, got} {
						switch op {
						case "done":
							_ = c.ctx.Done()
						case "own":
							c.cancel(errs[arg])
						case "parent":
							if c.parentCancel != nil {
								c.parentCancel(errs[arg])
							}
						case "derive":
							c.derive()
						}
					}
					if w, g := want.seen(), got.seen(); w != g {
						t.Fatalf("after step %d (%s):\nWithCancelCause: %s\nitemCtx:         %s", n+1, step, w, g)
					}
				}
				if w, g := want.seenDone(), got.seenDone(); w != g {
					t.Fatalf("at the end, with Done:\nWithCancelCause: %s\nitemCtx:         %s", w, g)
				}
			})
		}
	}
}

// ctxPair is a context under test, its parent and what was derived from it.
type ctxPair struct {
	parent       context.Context
	parentCancel context.CancelCauseFunc // nil when the parent cannot be cancelled
	ctx          context.Context
	cancel       context.CancelCauseFunc
	derived      []context.Context
	cancels      []context.CancelFunc
	ran          []chan struct{} // by AfterFunc
	closers      []func()
}

type valueKey struct{}

func newCtxPair(kind string, make func(context.Context) (context.Context, context.CancelCauseFunc)) *ctxPair {
	c := &ctxPair{}
	base := context.WithValue(context.Background(), valueKey{}, "v")
	switch kind {
	case "cancellable":
		c.parent, c.parentCancel = context.WithCancelCause(base)
	case "deadline":
		var cancel context.CancelFunc
		c.parent, cancel = context.WithDeadlineCause(base, time.Now().Add(time.Hour), errors.New("the deadline"))
		inner, innerCancel := context.WithCancelCause(c.parent)
		c.parent, c.parentCancel = inner, innerCancel
		c.closers = append(c.closers, cancel)
	case "without-cancel":
		// A cancellable context below a WithoutCancel: its cancellation never reaches the child.
		inner, innerCancel := context.WithCancelCause(base)
		c.parent, c.parentCancel = context.WithoutCancel(inner), innerCancel
	}
	c.ctx, c.cancel = make(c.parent)
	return c
}

func (c *ctxPair) derive() {
	d, cancel := context.WithCancel(c.ctx)
	ran := make(chan struct{})
	context.AfterFunc(c.ctx, func() { close(ran) })
	c.derived, c.cancels, c.ran = append(c.derived, d), append(c.cancels, cancel), append(c.ran, ran)
}

// seen is what a handler sees without calling Done on the context itself.
func (c *ctxPair) seen() string {
	s := fmt.Sprintf("err=%v cause=%v value=%v", c.ctx.Err(), context.Cause(c.ctx), c.ctx.Value(valueKey{}))
	dl, ok := c.ctx.Deadline()
	pdl, pok := c.parent.Deadline()
	s += fmt.Sprintf(" deadline-is-parent's=%v", dl.Equal(pdl) && ok == pok)
	for i, d := range c.derived {
		s += fmt.Sprintf(" | derived %d: err=%v cause=%v", i, d.Err(), context.Cause(d))
	}
	return s
}

// seenDone is seen plus whether Done is closed, for the context and what was
// derived (whose Done channels and AfterFuncs follow the context's without delay
// only once they were told: AfterFunc's function runs in a goroutine).
func (c *ctxPair) seenDone() string {
	s := c.seen() + fmt.Sprintf(" done=%v", closed(c.ctx.Done()))
	for i, d := range c.derived {
		s += fmt.Sprintf(" | derived %d done=%v", i, closed(d.Done()))
		if c.ctx.Err() != nil { // its AfterFunc runs, in a goroutine of its own
			select {
			case <-c.ran[i]:
				s += " after-func ran"
			case <-time.After(10 * time.Second):
				s += " after-func did not run"
			}
		}
	}
	return s
}

func (c *ctxPair) close() {
	for _, cancel := range c.cancels {
		cancel()
	}
	c.cancel(nil)
	if c.parentCancel != nil {
		c.parentCancel(nil)
	}
	for _, f := range c.closers {
		f()
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Contexts derived from a handler's context register with it as with any
// context.WithCancelCause: no goroutine each.
func TestItemCtxDerivesWithoutGoroutines(t *testing.T) {
	parent, cancelParent := context.WithCancel(context.Background())
	defer cancelParent()
	c := new(itemCtx)
	c.init(parent)
	before := runtime.NumGoroutine()
	var cancels []context.CancelFunc
	for range 1000 {
		_, cancel := context.WithCancel(c)
		cancels = append(cancels, cancel)
	}
	if grew := runtime.NumGoroutine() - before; grew > 100 {
		t.Fatalf("deriving 1000 contexts started %d goroutines", grew)
	}
	c.cancel(&LeaseLostError{Key: "k"})
	for _, cancel := range cancels {
		cancel()
	}
}

// A handler's context that nothing waits on costs no allocation: neither made nor
// cancelled with context.Canceled (how every attempt's context ends).
func TestItemCtxAllocatesNothingUntilWaitedOn(t *testing.T) {
	if cancelCtxKey == nil {
		t.Skip("context.Cause's key was not found: a cancellation makes the real child")
	}
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := make([]itemCtx, 101) // AllocsPerRun runs once more than asked
	n := 0
	allocs := testing.AllocsPerRun(100, func() {
		c := &cs[n]
		n++
		c.init(parent)
		if c.Err() != nil || context.Cause(c.plain()) != nil {
			t.Fatal("a fresh context is done")
		}
		c.cancel(context.Canceled)
		if !errors.Is(c.Err(), context.Canceled) {
			t.Fatal("not cancelled")
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per context", allocs)
	}
}
