package consumer_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
)

var benchNS = uuid.MustParse("6d3b2f6e-1f0a-4d6b-8e51-0c1c8b7d9a10")

// benchKeys makes n keys outside the measured loop: making keys is the caller's
// business, not the path's.
func benchKeys(b *testing.B, n int) []consumer.Key {
	out := make([]consumer.Key, n)
	for i := range out {
		out[i] = consumer.NewKey(benchNS, b.Name(), fmt.Sprint(i))
	}
	return out
}

// benchStore is a Redis store whose claim and settle calls are reported per
// message (claims/msg, settles/msg) when the benchmark ends.
func benchStore(b *testing.B) *redisstore.Store {
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(b), ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = c.Close() })
	calls := &benchCalls{}
	s, err := redisstore.NewStore(c, consumer.WithPrefix(testenv.Prefix(b)), redisstore.WithEvictionCheck(redisstore.EvictionIgnore),
		consumer.WithObserver(calls))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		b.ReportMetric(float64(calls.claims.Load())/float64(b.N), "claims/msg")
		b.ReportMetric(float64(calls.settles.Load())/float64(b.N), "settles/msg")
	})
	return s
}

// benchCalls counts a store's claim and settle calls.
type benchCalls struct{ claims, settles atomic.Int64 }

func (c *benchCalls) OnClaim(consumer.ClaimEvent)   { c.claims.Add(1) }
func (c *benchCalls) OnSettle(consumer.SettleEvent) { c.settles.Add(1) }

// BenchmarkExecuteBatch: one op is one message of a batch of 100, no-op handler,
// against a real Redis (make bench has the full table with CPU per process).
func BenchmarkExecuteBatch(b *testing.B) {
	s := benchStore(b)
	const size = 100
	keys := benchKeys(b, (b.N/size+1)*size)
	items := make([]consumer.BatchItem, size)
	payload := []byte(`{"order":42}`)
	h := func(context.Context, int, consumer.BatchItem) (struct{}, error) { return struct{}{}, nil }
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for start := 0; start < b.N; start += size {
		for i := range items {
			items[i] = consumer.BatchItem{Key: keys[start+i], Payload: payload}
		}
		for _, r := range consumer.ExecuteBatch(ctx, s, items, h) {
			if r.Outcome != consumer.Success {
				b.Fatal(r.Outcome, r.Err)
			}
		}
	}
}

// BenchmarkExecuteIdempotently: one message at a time.
func BenchmarkExecuteIdempotently(b *testing.B) {
	s := benchStore(b)
	keys := benchKeys(b, b.N)
	payload := []byte(`{"order":42}`)
	noop := func(context.Context) (struct{}, error) { return struct{}{}, nil }
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r := consumer.ExecuteIdempotently(ctx, s, keys[i], payload, noop); r.Outcome != consumer.Success {
			b.Fatal(r.Outcome, r.Err)
		}
	}
}

// BenchmarkPipeline: one op is one message submitted to a pipeline and settled,
// no-op handler, against a real Redis.
func BenchmarkPipeline(b *testing.B) {
	s := benchStore(b)
	keys := benchKeys(b, b.N)
	payload := []byte(`{"order":42}`)
	ctx := context.Background()
	p, err := consumer.NewPipeline[struct{}](ctx, s)
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(b.N)
	run := func(context.Context) (struct{}, error) { return struct{}{}, nil }
	done := func(r consumer.Result[struct{}]) {
		if r.Outcome != consumer.Success {
			b.Error(r.Outcome, r.Err)
		}
		wg.Done()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := p.Submit(ctx, consumer.PipelineItem[struct{}]{Key: keys[i], Payload: payload, Run: run, Done: done}); err != nil {
			b.Fatal(err)
		}
	}
	wg.Wait()
	b.StopTimer()
	if err := p.Shutdown(ctx); err != nil {
		b.Fatal(err)
	}
}
