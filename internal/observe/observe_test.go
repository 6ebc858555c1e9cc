package observe

import (
	"context"
	"testing"
)

type retryHook interface{ OnRetry(int) }

type counter struct{ n int }

func (c *counter) OnRetry(n int) { c.n += n }

// Each calls fn with exactly the observers that implement the hook, in order.
func TestEach(t *testing.T) {
	a, b := &counter{}, &counter{}
	type observer any
	obs := []observer{a, "not a hook", nil, b}
	calls := 0
	Each(obs, func(h retryHook) { calls++; h.OnRetry(calls) })
	if calls != 2 || a.n != 1 || b.n != 2 {
		t.Fatalf("%d calls, a %d, b %d; want 2 calls, a 1, b 2", calls, a.n, b.n)
	}
}

// A context holds one message and one source; a context without them answers nil and "".
func TestContext(t *testing.T) {
	ctx := context.Background()
	if MessageOf(ctx) != nil || SourceOf(ctx) != "" {
		t.Fatal("an empty context holds a message or a source")
	}
	m := &Message{Origin: Origin{Topic: "orders", Partition: 3, Offset: 9}}
	ctx = WithSource(WithMessage(ctx, m), "http")
	if MessageOf(ctx) != m || SourceOf(ctx) != "http" {
		t.Fatalf("message %+v, source %q", MessageOf(ctx), SourceOf(ctx))
	}
}
