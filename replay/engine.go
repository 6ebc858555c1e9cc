package replay

import (
	"context"

	"github.com/idemkit/idemkit/consumer"
)

// runBatch is the one place where replay hands a batch to idemkit's execution
// engine: consumer.ExecuteBatch, which claims the batch's keys in one round trip,
// runs the claimed handlers (concurrency at once) and completes them in one more.
// Swapping the engine means changing this function alone.
func runBatch[T any](ctx context.Context, store consumer.Store, items []consumer.BatchItem,
	fn consumer.BatchHandler[T], concurrency int) []consumer.Result[T] {
	return consumer.ExecuteBatch(ctx, store, items, fn, consumer.WithConcurrency(concurrency))
}
