package redis_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lua"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
)

// The engine's cost on this store beside the cost of the commands it sends, one
// op per message, no-op handler, batches of engineB: the lanes of make bench that
// the engine's targets compare (go-redis only, ExecuteBatch, the Pipeline). The
// keys are made before the timer starts, so that a count of the process's
// instructions between ResetTimer and StopTimer (callgrind's
// --zero-before='testing.(*B).ResetTimer' --dump-before='testing.(*B).StopTimer')
// compares the lanes on a machine whose speed varies.

const engineB = 100

var enginePayload = []byte(`{"order":42,"amount":1999}`)

// engineKeys are n keys as NewKey makes them.
func engineKeys(b *testing.B, n int) []consumer.Key {
	ns := uuid.New()
	out := make([]consumer.Key, n)
	for i := range out {
		out[i] = consumer.NewKey(ns, b.Name(), strconv.Itoa(i))
	}
	return out
}

// engineStore is a store with an observer counting its claim and settle calls,
// as the bench's engine lanes use.
func engineStore(b *testing.B) (*redisstore.Store, *redis.Client, *engineCalls) {
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(b), ContextTimeoutEnabled: true, PoolSize: 8})
	b.Cleanup(func() { _ = c.Close() })
	calls := &engineCalls{}
	s, err := redisstore.NewStore(c, consumer.WithPrefix(testenv.Prefix(b)), redisstore.WithEvictionCheck(redisstore.EvictionIgnore),
		consumer.WithObserver(calls))
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Load(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		b.ReportMetric(float64(calls.claims.Load())/float64(b.N), "claims/msg")
		b.ReportMetric(float64(calls.settles.Load())/float64(b.N), "settles/msg")
	})
	return s, c, calls
}

type engineCalls struct{ claims, settles atomic.Int64 }

func (c *engineCalls) OnClaim(consumer.ClaimEvent)   { c.claims.Add(1) }
func (c *engineCalls) OnSettle(consumer.SettleEvent) { c.settles.Add(1) }

// BenchmarkEngineRaw: the begin and complete calls the engine makes, straight on
// package lua with arguments built as cheaply as a caller can.
func BenchmarkEngineRaw(b *testing.B) {
	s, c, _ := engineStore(b)
	run := lua.NewRunner(c)
	ctx := context.Background()
	if err := run.Load(ctx); err != nil {
		b.Fatal(err)
	}
	var keys []string // record keys, as the store names them
	for _, k := range engineKeys(b, b.N) {
		keys = append(keys, s.RecordKey(k))
	}
	items := make([]lua.BeginItem, engineB)
	reps := make([]lua.BeginReply, engineB)
	settle := make([]lua.SettleItem, engineB)
	acks := make([]lua.AckReply, engineB)
	owners := make([]string, engineB)
	for i := range owners {
		owners[i] = "worker-1-" + strconv.Itoa(i)
	}
	fp := [16]byte(consumer.FingerprintOf(enginePayload))
	fps := make([][16]byte, engineB)
	b.ReportAllocs()
	b.ResetTimer()
	for start := 0; start < b.N; start += engineB {
		n := min(engineB, b.N-start)
		now := time.Now().Unix()
		for i := range n {
			fps[i] = fp
			items[i] = lua.BeginItem{Key: keys[start+i], Owner: owners[i], Fingerprint: &fps[i]}
		}
		run.Begin(ctx, lua.BeginArgs{Lease: 30 * time.Second, Retention: 24 * time.Hour, MaxAttempts: 5, Now: now},
			lua.Claims{Items: items[:n], Replies: reps[:n]})
		for i, rep := range reps[:n] {
			if rep.Err != nil || rep.Code != lua.Acquired {
				b.Fatalf("begin: %+v", rep)
			}
			settle[i] = lua.SettleItem{Key: items[i].Key, Owner: items[i].Owner, Fence: 1, Attempts: 1, Created: now,
				Fingerprint: &fps[i], Complete: true, Result: []byte("{}")}
		}
		run.Settle(ctx, lua.SettleArgs{MaxAttempts: 5, Now: now, Retention: 24 * time.Hour},
			lua.Settlements{Items: settle[:n], Replies: acks[:n]})
		for _, a := range acks[:n] {
			if a.Err != nil || a.Ack != lua.AckOK {
				b.Fatalf("complete: %+v", a)
			}
		}
	}
}

// BenchmarkEngineBatch: ExecuteBatch, engineB messages a call.
func BenchmarkEngineBatch(b *testing.B) {
	s, _, _ := engineStore(b)
	keys := engineKeys(b, b.N)
	items := make([]consumer.BatchItem, engineB)
	h := func(context.Context, int, consumer.BatchItem) (struct{}, error) { return struct{}{}, nil }
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for start := 0; start < b.N; start += engineB {
		n := min(engineB, b.N-start)
		for i := range n {
			items[i] = consumer.BatchItem{Key: keys[start+i], Payload: enginePayload}
		}
		for _, r := range consumer.ExecuteBatch(ctx, s, items[:n], h) {
			if r.Outcome != consumer.Success {
				b.Fatal(r.Outcome, r.Err)
			}
		}
	}
}

// BenchmarkEnginePipeline: one Pipeline with WithMaxBatch(engineB), fed one
// message at a time.
func BenchmarkEnginePipeline(b *testing.B) {
	s, _, _ := engineStore(b)
	keys := engineKeys(b, b.N)
	ctx := context.Background()
	p, err := consumer.NewPipeline[struct{}](ctx, s, consumer.WithMaxBatch(engineB))
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	var failed atomic.Int64
	wg.Add(b.N)
	run := func(context.Context) (struct{}, error) { return struct{}{}, nil }
	done := func(r consumer.Result[struct{}]) {
		if r.Outcome != consumer.Success {
			failed.Add(1)
		}
		wg.Done()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := p.Submit(ctx, consumer.PipelineItem[struct{}]{Key: keys[i], Payload: enginePayload, Run: run, Done: done}); err != nil {
			b.Fatal(err)
		}
	}
	wg.Wait()
	if err := p.Shutdown(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d messages did not succeed", n)
	}
}
