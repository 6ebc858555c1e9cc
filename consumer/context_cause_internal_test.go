package consumer

import (
	"context"
	"errors"
	"testing"
)

// TestItemCtxCause checks that the cause decideAll reads (itemCtx.cause) is what
// context.Cause answers for the handler's context, whatever cancelled it and in
// which order.
func TestItemCtxCause(t *testing.T) {
	lost := &LeaseLostError{Key: "k", Fence: 1, Reason: "test"}
	why := errors.New("the caller's reason")
	cases := []struct {
		name  string
		steps func(c *itemCtx, cancelParent context.CancelCauseFunc)
	}{
		{"live", func(*itemCtx, context.CancelCauseFunc) {}},
		{"own canceled", func(c *itemCtx, _ context.CancelCauseFunc) { c.cancel(context.Canceled) }},
		{"own lost", func(c *itemCtx, _ context.CancelCauseFunc) { c.cancel(lost) }},
		{"parent", func(_ *itemCtx, p context.CancelCauseFunc) { p(why) }},
		{"own canceled then parent", func(c *itemCtx, p context.CancelCauseFunc) { c.cancel(context.Canceled); p(why) }},
		{"parent then own lost", func(c *itemCtx, p context.CancelCauseFunc) { p(why); c.cancel(lost) }},
		{"done then own lost", func(c *itemCtx, _ context.CancelCauseFunc) { _ = c.Done(); c.cancel(lost) }},
		{"done then parent", func(c *itemCtx, p context.CancelCauseFunc) { _ = c.Done(); p(why) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			parent, cancelParent := context.WithCancelCause(context.Background())
			defer cancelParent(nil)
			c := new(itemCtx)
			c.init(parent)
			tc.steps(c, cancelParent)
			if got, want := c.cause(), context.Cause(c.plain()); got != want {
				t.Fatalf("cause() = %v, context.Cause = %v", got, want)
			}
		})
	}
}
