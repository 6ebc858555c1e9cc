package replay

import (
	"context"
	"sync"

	"github.com/idemkit/idemkit/consumer"
)

// engine is where replay hands the messages that run: idemkit's one execution
// engine. submit hands over one message, whose Done is then called once with its
// result; stop waits until every goroutine of the engine has ended.
type engine[T any] struct {
	submit func(ctx context.Context, it consumer.PipelineItem[T]) error
	stop   func(ctx context.Context) error
}

// newEngine starts the engine of one Execute: a consumer.Pipeline whose window is
// the batch size (WithBatchSize: messages between hand-over and result, and the
// most one claim or settle call carries) and whose handlers are WithConcurrency's.
// With one handler it makes one claim call at a time, so that handlers run in
// source order. A store with WithLock, which the Pipeline refuses, runs its
// messages one at a time through consumer.ExecuteIdempotently, each under its
// lock, in source order. ctx is the handlers' context.
func newEngine[T any](ctx context.Context, store consumer.Store, c config) (engine[T], error) {
	if store.Settings().Locker != nil {
		return serialEngine[T](ctx, store, c.batch), nil
	}
	opts := []consumer.PipelineOption{consumer.WithInFlight(c.batch), consumer.WithMaxBatch(c.batch),
		consumer.WithConcurrency(c.concurrency), consumer.WithSource("replay")}
	if c.concurrency == 1 {
		opts = append(opts, consumer.WithCallsInFlight(1))
	}
	p, err := consumer.NewPipeline[T](context.WithoutCancel(ctx), store, opts...)
	if err != nil {
		return engine[T]{}, configError("%w", err)
	}
	return engine[T]{submit: p.Submit, stop: p.Shutdown}, nil
}

// serialEngine runs messages one after another through consumer.ExecuteIdempotently
// (under the store's lock), with ctx as their context. It holds up to window
// messages; the executor never hands it more.
func serialEngine[T any](ctx context.Context, store consumer.Store, window int) engine[T] {
	q := make(chan consumer.PipelineItem[T], window)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for it := range q {
			it.Done(consumer.ExecuteIdempotently(ctx, store, it.Key, it.Payload, it.Run))
		}
	}()
	var once sync.Once
	return engine[T]{
		submit: func(_ context.Context, it consumer.PipelineItem[T]) error { q <- it; return nil },
		stop: func(context.Context) error {
			once.Do(func() { close(q) })
			<-ended
			return nil
		},
	}
}
