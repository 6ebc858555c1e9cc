package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/consumer/consumertest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/redis/go-redis/v9"
)

func redisFactory(client func(t *testing.T) redis.UniversalClient) consumertest.Factory {
	return func(t *testing.T, opts ...consumer.Option) (consumer.Store, error) {
		all := append([]consumer.Option{consumer.WithPrefix(testenv.Prefix(t))}, opts...)
		return consumer.NewRedisStore(client(t), all...)
	}
}

func TestRedisStoreConformance(t *testing.T) {
	consumertest.Run(t, redisFactory(func(t *testing.T) redis.UniversalClient { return testenv.Redis(t) }))
}

func TestRedisClusterConformance(t *testing.T) {
	cluster := testenv.RedisCluster(t)
	client := cluster.Client(t)
	consumertest.Run(t, redisFactory(func(t *testing.T) redis.UniversalClient { return client }))
}

func TestRedisSentinelConformance(t *testing.T) {
	client := testenv.RedisSentinel(t).Client(t)
	consumertest.Run(t, redisFactory(func(t *testing.T) redis.UniversalClient { return client }))
}

func newRedisStore(t *testing.T, c redis.UniversalClient, opts ...consumer.Option) *consumer.RedisStore {
	t.Helper()
	s, err := consumer.NewRedisStore(c, append([]consumer.Option{consumer.WithPrefix(testenv.Prefix(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var testNS = consumer.NewKey([16]byte{1}, "redis-tests")

func k(parts ...string) consumer.Key { return consumer.Key(fmt.Sprint(testNS, ":", parts)) }

func TestRecordKeyLayout(t *testing.T) {
	c := redis.NewClient(&redis.Options{})
	defer c.Close()
	s, err := consumer.NewRedisStore(c, consumer.WithScope("payments"))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.RecordKey("abc"); got != "idemkit:{payments:abc}" {
		t.Fatalf("record key = %q", got)
	}
	if _, err := consumer.NewRedisStore(nil); !errors.Is(err, consumer.ErrInvalidConfig) {
		t.Fatalf("nil client: %v", err)
	}
}

// A key holding something that is not an idemkit record gives ErrCorruptRecord,
// never a panic, and is left as it was.
func TestCorruptRecords(t *testing.T) {
	c := testenv.Redis(t)
	s := newRedisStore(t, c)
	ctx := context.Background()
	cases := []struct {
		name  string
		setup func(key string) error
	}{
		{"string", func(key string) error { return c.Set(ctx, key, "hello", 0).Err() }},
		{"list", func(key string) error { return c.RPush(ctx, key, "a").Err() }},
		{"foreign hash", func(key string) error { return c.HSet(ctx, key, "user", "42").Err() }},
		{"unknown state", func(key string) error { return c.HSet(ctx, key, "s", "weird", "f", 1, "a", 1).Err() }},
		{"no fence", func(key string) error { return c.HSet(ctx, key, "s", "completed").Err() }},
		{"no lease", func(key string) error { return c.HSet(ctx, key, "s", "started", "f", 1, "a", 1).Err() }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := k("corrupt", tc.name)
			if err := tc.setup(s.RecordKey(key)); err != nil {
				t.Fatal(err)
			}
			before, _ := c.Dump(ctx, s.RecordKey(key)).Result()
			r := consumer.ExecuteIdempotently(ctx, s, key, nil, func(ctx context.Context) (int, error) {
				t.Fatal("handler ran on a corrupt record")
				return 0, nil
			})
			var ce *consumer.CorruptRecordError
			if r.Outcome != consumer.Error || !errors.As(r.Err, &ce) || ce.Key != key || ce.Reason == "" {
				t.Fatalf("outcome %v err %v, want a *CorruptRecordError", r.Outcome, r.Err)
			}
			if r.Action() != consumer.DeadLetter {
				t.Fatalf("action %v, want dead-letter", r.Action())
			}
			if _, err := s.Peek(ctx, key); !errors.Is(err, consumer.ErrCorruptRecord) && tc.name != "no lease" {
				t.Fatalf("peek: %v", err)
			}
			after, _ := c.Dump(ctx, s.RecordKey(key)).Result()
			if after != before {
				t.Fatal("the corrupt value was changed")
			}
		})
	}
	// Settle, extend and release on a key of the wrong type.
	key := k("corrupt", "ops")
	_ = c.Set(ctx, s.RecordKey(key), "x", 0).Err()
	if err := s.Settle(ctx, []consumer.Settlement{{Key: key, Owner: "o", Complete: true}})[0].Err; !errors.Is(err, consumer.ErrCorruptRecord) {
		t.Fatalf("settle: %v", err)
	}
	if err := s.Extend(ctx, []consumer.Owned{{Key: key, Owner: "o"}})[0]; !errors.Is(err, consumer.ErrCorruptRecord) {
		t.Fatalf("extend: %v", err)
	}
}

// The begin script's EXHAUSTED row: a retry record whose attempts reached the
// maximum (here: the maximum was lowered after two failures).
func TestBeginExhaustsRetryRecordAtMax(t *testing.T) {
	c := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	wide, _ := consumer.NewRedisStore(c, consumer.WithPrefix(prefix), consumer.WithMaxAttempts(5))
	narrow, _ := consumer.NewRedisStore(c, consumer.WithPrefix(prefix), consumer.WithMaxAttempts(2))
	ctx := context.Background()
	key := k("lowered")
	boom := errors.New("flaky")
	var runs atomic.Int32
	fn := func(ctx context.Context) (int, error) { runs.Add(1); return 0, boom }
	for i := 0; i < 2; i++ {
		if r := consumer.ExecuteIdempotently(ctx, wide, key, nil, fn); !errors.Is(r.Err, boom) || errors.Is(r.Err, consumer.ErrAttemptsExhausted) {
			t.Fatalf("attempt %d: %v", i+1, r.Err)
		}
	}
	r := consumer.ExecuteIdempotently(ctx, narrow, key, nil, fn)
	if r.Outcome != consumer.Error || !errors.Is(r.Err, consumer.ErrAttemptsExhausted) || runs.Load() != 2 {
		t.Fatalf("begin at max: %v %v after %d runs", r.Outcome, r.Err, runs.Load())
	}
	rec, _ := narrow.Peek(ctx, key)
	if rec.State != "failed" || rec.Permanent || rec.Error != "flaky" {
		t.Fatalf("record = %+v", rec)
	}
}

// With the Redis server stopped, nothing runs (fail closed) and every delivery is a
// retryable ERROR; when it returns, deliveries succeed again.
func TestFailClosedWhileRedisIsDown(t *testing.T) {
	srv := testenv.RedisServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	s := newRedisStore(t, c)
	ctx := context.Background()
	var runs atomic.Int32
	fn := func(ctx context.Context) (int, error) { runs.Add(1); return 1, nil }

	for i := 0; i < 10; i++ {
		if r := consumer.ExecuteIdempotently(ctx, s, k("up", fmt.Sprint(i)), nil, fn); r.Outcome != consumer.Success {
			t.Fatalf("before the outage: %v %v", r.Outcome, r.Err)
		}
	}
	// Stop the server while a handler runs: its completion cannot be stored.
	inHandler := consumer.ExecuteIdempotently(ctx, s, k("mid-run"), nil, func(ctx context.Context) (int, error) {
		runs.Add(1)
		srv.Stop()
		return 1, nil
	})
	if inHandler.Outcome != consumer.Error || !errors.Is(inHandler.Err, consumer.ErrStoreUnavailable) || !inHandler.Retryable() {
		t.Fatalf("completion during the outage: %v %v", inHandler.Outcome, inHandler.Err)
	}
	for i := 0; i < 20; i++ {
		r := consumer.ExecuteIdempotently(ctx, s, k("down", fmt.Sprint(i)), nil, fn)
		var se *consumer.StoreError
		if r.Outcome != consumer.Error || !errors.As(r.Err, &se) || se.Op != "begin" || !r.Retryable() {
			t.Fatalf("during the outage: %v %v", r.Outcome, r.Err)
		}
	}
	batch := consumer.ExecuteBatch(ctx, s, []consumer.BatchItem{{Key: k("down-batch", "1")}, {Key: k("down-batch", "2")}},
		func(ctx context.Context, i int, it consumer.BatchItem) (int, error) { runs.Add(1); return 1, nil })
	for _, r := range batch {
		if !errors.Is(r.Err, consumer.ErrStoreUnavailable) {
			t.Fatalf("batch during the outage: %v", r.Err)
		}
	}
	if n := runs.Load(); n != 11 {
		t.Fatalf("handlers ran %d times, want 11: nothing may run while the store is down", n)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	// go-redis stops dialling a server that refused it for a moment; the first
	// delivery after the restart is retried until the pool dials again (bounded).
	for deadline := time.Now().Add(10 * time.Second); ; {
		r := consumer.ExecuteIdempotently(ctx, s, k("back", "first"), nil, fn)
		if r.Outcome == consumer.Success {
			break
		}
		if !errors.Is(r.Err, consumer.ErrStoreUnavailable) || time.Now().After(deadline) {
			t.Fatalf("no recovery after the restart: %v %v", r.Outcome, r.Err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := 0; i < 9; i++ {
		if r := consumer.ExecuteIdempotently(ctx, s, k("back", fmt.Sprint(i)), nil, fn); r.Outcome != consumer.Success {
			t.Fatalf("after recovery: %v %v", r.Outcome, r.Err)
		}
	}
	if n := runs.Load(); n != 21 {
		t.Fatalf("handlers ran %d times, want 21", n)
	}
}

// WithFailOpen runs the handler unguarded while the store is down, and says so.
func TestFailOpenRunsUnguarded(t *testing.T) {
	srv := testenv.RedisServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	s := newRedisStore(t, c, consumer.WithFailOpen(true))
	srv.Stop()
	var info consumer.Info
	r := consumer.ExecuteIdempotently(context.Background(), s, k("open"), nil, func(ctx context.Context) (int, error) {
		info, _ = consumer.InfoFromContext(ctx)
		return 5, nil
	})
	if r.Outcome != consumer.Success || !r.Unguarded || r.Value != 5 || !info.Unguarded {
		t.Fatalf("fail-open: %+v (info %+v)", r, info)
	}
	if _, ok := consumer.FenceFromContext(context.Background()); ok {
		t.Fatal("FenceFromContext outside a handler reported a fence")
	}
}

// SCRIPT FLUSH between a batch's claim and its completion, and repeatedly while
// batches run: scripts are reloaded, inside pipelines too, and counts stay exact.
func TestScriptFlushMidBatch(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client func(t *testing.T) (redis.UniversalClient, func(context.Context) error)
	}{
		{"single", func(t *testing.T) (redis.UniversalClient, func(context.Context) error) {
			srv := testenv.RedisServer(t)
			c := srv.Client(t)
			return c, func(ctx context.Context) error { return c.ScriptFlush(ctx).Err() }
		}},
		{"cluster", func(t *testing.T) (redis.UniversalClient, func(context.Context) error) {
			c := testenv.RedisCluster(t).Client(t)
			return c, func(ctx context.Context) error { return c.ScriptFlush(ctx).Err() }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, flush := tc.client(t)
			s := newRedisStore(t, c)
			ctx := context.Background()
			runs := map[consumer.Key]int{}
			var mu sync.Mutex
			fn := func(ctx context.Context, i int, it consumer.BatchItem) (int, error) {
				mu.Lock()
				runs[it.Key]++
				mu.Unlock()
				if i == 0 {
					if err := flush(ctx); err != nil { // between this batch's claim and its completion
						return 0, err
					}
				}
				return i, nil
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					case <-time.After(3 * time.Millisecond):
						_ = flush(ctx)
					}
				}
			}()
			const batches, size = 30, 50
			for b := 0; b < batches; b++ {
				items := make([]consumer.BatchItem, size)
				for i := range items {
					items[i] = consumer.BatchItem{Key: k("flush", fmt.Sprint(b, "-", i))}
				}
				for i, r := range consumer.ExecuteBatch(ctx, s, items, fn) {
					if r.Outcome != consumer.Success || r.Value != i {
						t.Fatalf("batch %d item %d: %v %v", b, i, r.Outcome, r.Err)
					}
				}
				for i, r := range consumer.ExecuteBatch(ctx, s, items, fn) {
					if r.Outcome != consumer.Duplicate || r.Value != i {
						t.Fatalf("batch %d item %d again: %v %v", b, i, r.Outcome, r.Err)
					}
				}
			}
			close(stop)
			wg.Wait()
			if len(runs) != batches*size {
				t.Fatalf("%d keys ran, want %d", len(runs), batches*size)
			}
			for key, n := range runs {
				if n != 1 {
					t.Fatalf("key %s ran %d times", key, n)
				}
			}
		})
	}
}

// One begin round trip and one completion round trip per batch, whatever its size.
func TestBatchRoundTrips(t *testing.T) {
	c := testenv.Redis(t)
	calls := &testenv.CommandCounter{}
	c.AddHook(calls)
	s := newRedisStore(t, c)
	if err := s.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	items := make([]consumer.BatchItem, 100)
	for i := range items {
		items[i] = consumer.BatchItem{Key: k("trips", fmt.Sprint(i))}
	}
	calls.Reset()
	res := consumer.ExecuteBatch(context.Background(), s, items, func(ctx context.Context, i int, it consumer.BatchItem) (int, error) {
		return i, nil
	})
	for _, r := range res {
		if r.Outcome != consumer.Success {
			t.Fatalf("%v %v", r.Outcome, r.Err)
		}
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("a batch of 100 sent %d Redis commands, want 2 (one claim, one completion)", n)
	}
}
