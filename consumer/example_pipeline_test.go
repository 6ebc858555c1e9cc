package consumer_test

import (
	"context"
	"fmt"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/store/memory"
)

// order is a delivered message that is also the context it is submitted with,
// so that one DoneContext function answers every message without a closure each.
type order struct {
	context.Context
	id      string
	outcome consumer.Outcome
}

func ExamplePipelineItem_doneContext() {
	store, _ := memory.NewStore()
	ctx := context.Background()
	p, err := consumer.NewPipeline[string](ctx, store)
	if err != nil {
		panic(err)
	}
	charge := func(ctx context.Context) (string, error) { return "charged", nil }
	settled := func(ctx context.Context, r consumer.Result[string]) {
		ctx.(*order).outcome = r.Outcome // one writer per message: its Done
	}
	orders := []*order{{id: "41"}, {id: "42"}, {id: "42"}} // 42 delivered twice
	for _, o := range orders {
		o.Context = ctx
		key := consumer.NewKey(charges, "order", o.id)
		if err := p.Submit(o, consumer.PipelineItem[string]{Key: key, Run: charge, DoneContext: settled}); err != nil {
			panic(err)
		}
	}
	if err := p.Shutdown(ctx); err != nil { // waits for every message's answer
		panic(err)
	}
	for _, o := range orders {
		fmt.Println(o.id, o.outcome)
	}
	// Output:
	// 41 SUCCESS
	// 42 SUCCESS
	// 42 DUPLICATE
}
