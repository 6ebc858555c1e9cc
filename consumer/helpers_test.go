package consumer_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
)

// must returns s, panicking on err: for stores a test cannot run without.
func must[S any](s S, err error) S {
	if err != nil {
		panic(err)
	}
	return s
}

// newRedisStore is a Redis store under the test's own key prefix.
func newRedisStore(t *testing.T, c redis.UniversalClient, opts ...consumer.Option) *redisstore.Store {
	t.Helper()
	s, err := redisstore.NewStore(c, append([]consumer.Option{consumer.WithPrefix(testenv.Prefix(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// results collects what a pipeline answers, one Done per submitted message.
type results[T any] struct {
	mu   sync.Mutex
	got  map[consumer.Key][]consumer.Result[T]
	wg   sync.WaitGroup
	done atomic.Int64
}

func newResults[T any]() *results[T] {
	return &results[T]{got: map[consumer.Key][]consumer.Result[T]{}}
}

func (r *results[T]) item(key consumer.Key, run func(ctx context.Context) (T, error)) consumer.PipelineItem[T] {
	r.wg.Add(1)
	return consumer.PipelineItem[T]{Key: key, Payload: []byte(key), Run: run, Done: func(res consumer.Result[T]) {
		r.mu.Lock()
		r.got[key] = append(r.got[key], res)
		r.mu.Unlock()
		r.done.Add(1)
		r.wg.Done()
	}}
}

// finish waits until every message submitted through r's items has been
// answered, then shuts p down, failing t if Shutdown fails.
func (r *results[T]) finish(ctx context.Context, t *testing.T, p *consumer.Pipeline[T]) {
	t.Helper()
	r.wg.Wait()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// redeliver reports whether r is a delivery to make again, as a broker would: its
// handler never started (ran is false) and it did not count as an attempt, as
// when its claim was answered too late to use, or not at all, on a busy machine.
func redeliver[T any](r consumer.Result[T], ran bool) bool {
	return r.Outcome == consumer.Error && consumer.NotAnAttempt(r.Err) && !ran
}
