package kafkashare

import (
	"context"
	"runtime"
	"testing"

	"github.com/idemkit/idemkit/internal/observe"
	"github.com/twmb/franz-go/pkg/kgo"
)

type outerKey struct{}

// A submission is its cancellable context to package context: the contexts
// derived from it (as the engine derives a handler's) are registered with it,
// without a goroutine each, and see its cancellation and cause. They answer the
// record's delivery count, message and held record through it, and anything else
// from the poll's base.
func TestSubmissionIsItsCancellableContext(t *testing.T) {
	rec := &kgo.Record{Topic: "payments", Partition: 2, Offset: 7,
		Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("tp-7")}, {Key: "b", Value: []byte("x")}}}
	h := &held[int]{rec: rec, count: 3, msg: message(rec)}
	base := context.WithoutCancel(context.WithValue(context.Background(), outerKey{}, "outer"))

	const n = 200
	subs := make([]*submission[int], n)
	children := make([]context.Context, n)
	before := runtime.NumGoroutine()
	for i := range n {
		ctx, cancel := context.WithCancelCause(base)
		subs[i] = &submission[int]{Context: ctx, h: h, cancel: cancel}
		child, stop := context.WithCancelCause(subs[i]) // as the engine derives a handler's context
		t.Cleanup(func() { stop(nil) })
		children[i] = child
	}
	if started := runtime.NumGoroutine() - before; started >= n/2 {
		t.Fatalf("%d goroutines started for %d contexts derived from submissions: package context did not find their cancellable context", started, n)
	}

	child := children[0]
	if got, ok := DeliveryCount(child); !ok || got != 3 {
		t.Errorf("DeliveryCount = %d, %v; want 3, true", got, ok)
	}
	if _, ok := DeliveryCount(context.Background()); ok {
		t.Error("DeliveryCount answered outside a handler")
	}
	m := observe.MessageOf(child)
	if m == nil || m.Headers == nil || m.Headers.Get("traceparent") != "tp-7" || len(m.Headers.Keys()) != 2 ||
		m.Origin.Topic != "payments" || m.Origin.Partition != 2 || m.Origin.Offset != 7 {
		t.Errorf("message %+v: want the record's headers and origin", m)
	}
	if got := child.Value(heldKey{}); got != h {
		t.Errorf("held record %v, want %p", got, h)
	}
	if got := child.Value(outerKey{}); got != "outer" {
		t.Errorf("the base's value %v, want outer", got)
	}

	for i, s := range subs {
		if children[i].Err() != nil {
			t.Fatal("a derived context ended before its submission was cancelled")
		}
		cause := errShutdown
		if i%2 == 0 {
			cause = errLockExpiring
		}
		s.cancel(cause)
		select {
		case <-children[i].Done():
		default:
			t.Fatal("cancelling a submission did not end the context derived from it at once")
		}
		if got := context.Cause(children[i]); got != cause {
			t.Fatalf("derived context's cause %v, want %v", got, cause)
		}
	}
}
