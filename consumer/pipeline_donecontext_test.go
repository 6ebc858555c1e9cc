package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/idemkit/idemkit/consumer"
)

// delivery is a message that is its own context: what a caller submits when one
// DoneContext function serves every message.
type delivery struct {
	context.Context
	n int
}

// One DoneContext function serves every message: each message is answered once,
// given the very context it was submitted with, with its own result: the first
// delivery of each key SUCCESS, the second DUPLICATE of it, a message with an
// invalid key an Error from Submit itself.
func TestPipelineDoneContextGetsTheSubmittedContext(t *testing.T) {
	for name, s := range pipelineStores(t) {
		t.Run(name, func(t *testing.T) {
			const keys = 50
			ctx := context.Background()
			p, err := consumer.NewPipeline[int](ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			prefix := t.Name() + "-"
			var mu sync.Mutex
			runs := map[int]int{}
			answers := map[*delivery][]consumer.Result[int]{}
			settled := func(ctx context.Context, r consumer.Result[int]) {
				d, ok := ctx.(*delivery)
				if !ok {
					t.Errorf("DoneContext given a %T, not the submitted context", ctx)
					return
				}
				mu.Lock()
				answers[d] = append(answers[d], r)
				mu.Unlock()
			}
			run := func(ctx context.Context) (int, error) {
				d := ctx.Value(deliveryKey{}).(*delivery)
				mu.Lock()
				runs[d.n%keys]++
				mu.Unlock()
				return d.n % keys, nil
			}
			var sent []*delivery
			submit := func(n int, key consumer.Key) {
				d := &delivery{n: n}
				d.Context = context.WithValue(ctx, deliveryKey{}, d)
				sent = append(sent, d)
				if err := p.Submit(d, consumer.PipelineItem[int]{Key: key, Payload: []byte(key), Run: run, DoneContext: settled}); err != nil {
					t.Fatal(err)
				}
			}
			for n := 0; n < 2*keys; n++ {
				submit(n, consumer.Key(fmt.Sprint(prefix, n%keys)))
			}
			submit(2*keys, "") // invalid: answered by Submit
			if err := p.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			var success, duplicate, invalid int
			for _, d := range sent {
				rs := answers[d]
				if len(rs) != 1 {
					t.Fatalf("message %d answered %d times, want once", d.n, len(rs))
				}
				switch r := rs[0]; {
				case d.n == 2*keys && r.Outcome == consumer.Error && r.Err != nil:
					invalid++
				case d.n < keys && r.Outcome == consumer.Success && r.Value == d.n:
					success++
				case d.n >= keys && d.n < 2*keys && r.Outcome == consumer.Duplicate && r.Value == d.n%keys:
					duplicate++
				default:
					t.Errorf("message %d: %v %d %v", d.n, r.Outcome, r.Value, r.Err)
				}
			}
			if len(answers) != 2*keys+1 || success != keys || duplicate != keys || invalid != 1 {
				t.Errorf("answered %d messages: %d SUCCESS, %d DUPLICATE, %d invalid; want %d, %d, %d, 1",
					len(answers), success, duplicate, invalid, 2*keys+1, keys, keys)
			}
			for k := 0; k < keys; k++ {
				if runs[k] != 1 {
					t.Errorf("key %d ran %d times, want once", k, runs[k])
				}
			}
		})
	}
}

type deliveryKey struct{}

// Submit refuses an item with neither Done nor DoneContext, or with both, and
// calls neither.
func TestPipelineSubmitWantsOneDone(t *testing.T) {
	ctx := context.Background()
	for name, s := range pipelineStores(t) {
		t.Run(name, func(t *testing.T) {
			p, err := consumer.NewPipeline[int](ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			calls := 0
			done := func(consumer.Result[int]) { calls++ }
			doneCtx := func(context.Context, consumer.Result[int]) { calls++ }
			run := func(context.Context) (int, error) { return 1, nil }
			key := consumer.Key(t.Name())
			for _, tc := range []struct {
				name string
				it   consumer.PipelineItem[int]
			}{
				{"neither", consumer.PipelineItem[int]{Key: key, Run: run}},
				{"both", consumer.PipelineItem[int]{Key: key, Run: run, Done: done, DoneContext: doneCtx}},
				{"no Run", consumer.PipelineItem[int]{Key: key, DoneContext: doneCtx}},
			} {
				if err := p.Submit(ctx, tc.it); !errors.Is(err, consumer.ErrInvalidConfig) {
					t.Errorf("%s: Submit = %v, want ErrInvalidConfig", tc.name, err)
				}
			}
			if err := p.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			if calls != 0 {
				t.Errorf("Done or DoneContext called %d times for refused items, want 0", calls)
			}
		})
	}
}
