package replay_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/replay"
	"github.com/idemkit/idemkit/store/memory"
)

// Plan a replay of three archived messages, one of which was processed already,
// then execute it: only the two new ones run.
func Example() {
	ctx := context.Background()
	store, _ := memory.NewStore(consumer.WithScope("payments"))
	consumer.ExecuteIdempotently(ctx, store, "order-1", []byte(`{"amount":10}`), func(context.Context) (string, error) {
		return "charged", nil
	})
	archive := `{"key":"order-1","payload":{"amount":10}}
{"key":"order-2","payload":{"amount":20}}
{"key":"order-3","payload":{"amount":30}}
`
	plan, _ := replay.Plan(ctx, store, replay.NewJSONL("archive", strings.NewReader(archive)))
	fmt.Println("plan:", plan.Counts[replay.Unseen], "new,", plan.Counts[replay.Duplicate], "duplicate")

	rep, err := replay.Execute(ctx, store, replay.NewJSONL("archive", strings.NewReader(archive)),
		func(ctx context.Context, m replay.Message) (string, error) {
			fmt.Println("charging", m.Key, string(m.Payload))
			return "charged", nil
		}, replay.WithConcurrency(1))
	if err != nil {
		panic(err)
	}
	fmt.Println("ran", rep.Counts[replay.Ran], "duplicates", rep.Counts[replay.Duplicate], "next line", rep.Checkpoint.Next[""])
	// Output:
	// plan: 2 new, 1 duplicate
	// charging order-2 {"amount":20}
	// charging order-3 {"amount":30}
	// ran 2 duplicates 1 next line 4
}
