package redis_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/consumer/consumertest"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
)

func redisFactory(client func(t *testing.T) redis.UniversalClient) consumertest.Factory {
	return func(t *testing.T, opts ...consumer.Option) (consumer.Store, error) {
		all := append([]consumer.Option{consumer.WithPrefix(testenv.Prefix(t))}, opts...)
		return redisstore.NewStore(client(t), all...)
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

// TestRedisStoreBadInput: a typed-nil client, and values at a record's key that
// are not records. Redis has no table or schema to be missing.
func TestRedisStoreBadInput(t *testing.T) {
	c := testenv.Redis(t)
	ctx := context.Background()
	foreign := func(name string, write func(key string) error) consumertest.ForeignValue {
		return consumertest.ForeignValue{Name: name, Write: func(t *testing.T, s consumer.Store, key consumer.Key) func() string {
			rk := s.(*redisstore.Store).RecordKey(key)
			if err := write(rk); err != nil {
				t.Fatal(err)
			}
			return func() string { return c.Dump(ctx, rk).Val() }
		}}
	}
	consumertest.RunBadInput(t, consumertest.BadInputFixtures{
		New:      redisFactory(func(t *testing.T) redis.UniversalClient { return c }),
		NilStore: consumer.Store((*redisstore.Store)(nil)),
		NilClient: func(t *testing.T) (consumer.Store, error) {
			var nilClient *redis.Client // what an ignored constructor error leaves
			return redisstore.NewStore(nilClient)
		},
		NilClientHint: "*redis.Client",
		Foreign: []consumertest.ForeignValue{
			foreign("a string", func(key string) error { return c.Set(ctx, key, "hello", 0).Err() }),
			foreign("a list", func(key string) error { return c.RPush(ctx, key, "a").Err() }),
			foreign("a foreign hash", func(key string) error { return c.HSet(ctx, key, "user", "42").Err() }),
			foreign("an unknown state", func(key string) error { return c.HSet(ctx, key, "s", "weird", "f", 1, "a", 1).Err() }),
			foreign("no fence", func(key string) error { return c.HSet(ctx, key, "s", "completed").Err() }),
		},
	})
}

func newRedisStore(t *testing.T, c redis.UniversalClient, opts ...consumer.Option) *redisstore.Store {
	t.Helper()
	s, err := redisstore.NewStore(c, append([]consumer.Option{consumer.WithPrefix(testenv.Prefix(t))}, opts...)...)
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
	s, err := redisstore.NewStore(c, consumer.WithScope("payments"))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.RecordKey("abc"); got != "idemkit:{payments:abc}" {
		t.Fatalf("record key = %q", got)
	}
	if _, err := redisstore.NewStore(nil); !errors.Is(err, consumer.ErrInvalidConfig) {
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
	wide, _ := redisstore.NewStore(c, consumer.WithPrefix(prefix), consumer.WithMaxAttempts(5))
	narrow, _ := redisstore.NewStore(c, consumer.WithPrefix(prefix), consumer.WithMaxAttempts(2))
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

// One claim round trip (a pipeline of SET NX) and one completion round trip per
// batch of fresh keys, whatever its size; a batch of keys that exist claims them
// in one more round trip, through the begin script.
func TestBatchRoundTrips(t *testing.T) {
	c := testenv.Redis(t)
	calls := &testenv.CommandCounter{}
	c.AddHook(calls)
	s := newRedisStore(t, c)
	if err := s.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The completions: one complete script call, or where the server has SET IFEQ
	// (Redis 8.4+, Valkey 8.1+) one SET IFEQ each, in the same one round trip.
	want, what := int64(101), "100 SET NX, 1 complete script call"
	if hasSetIFEQ(t, c) {
		want, what = 200, "100 SET NX, 100 SET IFEQ"
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
	if trips, n := calls.RoundTrips(), calls.Load(); trips != 2 || n != want {
		t.Fatalf("a batch of 100 fresh keys took %d round trips and %d commands, want 2 and %d (%s)", trips, n, want, what)
	}
	calls.Reset()
	res = consumer.ExecuteBatch(context.Background(), s, items, func(ctx context.Context, i int, it consumer.BatchItem) (int, error) {
		t.Error("ran a duplicate")
		return i, nil
	})
	for _, r := range res {
		if r.Outcome != consumer.Duplicate {
			t.Fatalf("%v %v", r.Outcome, r.Err)
		}
	}
	if trips, n := calls.RoundTrips(), calls.Load(); trips != 2 || n != 101 {
		t.Fatalf("a batch of 100 duplicates took %d round trips and %d commands, want 2 and 101 (100 SET NX, 1 begin script)", trips, n)
	}
}

// hasSetIFEQ reports whether the server behind c documents SET's IFEQ condition.
func hasSetIFEQ(t *testing.T, c redis.UniversalClient) bool {
	t.Helper()
	docs, err := c.Do(context.Background(), "command", "docs", "set").Result()
	if err != nil {
		t.Fatalf("COMMAND DOCS SET: %v", err)
	}
	return strings.Contains(fmt.Sprint(docs), "IFEQ")
}

// On a Ring, SCRIPT LOAD goes to one shard only; the store loads its scripts on
// every shard, up front and when a shard answers NOSCRIPT inside a pipeline.
func TestRingLoadsScriptsOnEveryShard(t *testing.T) {
	addrs := map[string]string{}
	for i := 0; i < 4; i++ {
		addrs[fmt.Sprint("shard-", i)] = testenv.RedisServer(t).Addr
	}
	ctx := context.Background()
	for _, load := range []bool{true, false} {
		for round := 0; round < 3; round++ {
			ring := redis.NewRing(&redis.RingOptions{Addrs: addrs})
			if err := ring.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
				return c.ScriptFlush(ctx).Err()
			}); err != nil {
				t.Fatal(err)
			}
			s := newRedisStore(t, ring)
			if load {
				if err := s.Load(ctx); err != nil {
					t.Fatal(err)
				}
			}
			items := make([]consumer.BatchItem, 40)
			for i := range items {
				items[i] = consumer.BatchItem{Key: consumer.Key(fmt.Sprint("k", i))}
			}
			var runs atomic.Int32
			res := consumer.ExecuteBatch(ctx, s, items, func(context.Context, int, consumer.BatchItem) (int, error) {
				runs.Add(1)
				return 1, nil
			})
			for i, r := range res {
				if r.Outcome != consumer.Success {
					t.Fatalf("load=%v round %d item %d: %v %v", load, round, i, r.Outcome, r.Err)
				}
			}
			if runs.Load() != int32(len(items)) {
				t.Fatalf("runs %d", runs.Load())
			}
			_ = ring.Close()
		}
	}
}

// captured is a slog handler that keeps the messages logged at Warn and above.
type captured struct {
	mu   sync.Mutex
	msgs []string
}

func (c *captured) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (c *captured) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, r.Message)
	return nil
}
func (c *captured) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *captured) WithGroup(string) slog.Handler      { return c }

func (c *captured) count(part string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, m := range c.msgs {
		if strings.Contains(m, part) {
			n++
		}
	}
	return n
}

// A Redis that evicts records (maxmemory with an evicting policy) is warned
// about at construction, or refused when asked; one that keeps nothing on disk
// is warned about; Check says the same without repeating the warnings.
func TestEvictionAndPersistenceChecks(t *testing.T) {
	ctx := context.Background()
	evicting := testenv.RedisServer(t, "--maxmemory", "10mb", "--maxmemory-policy", "allkeys-lru")
	safe := testenv.RedisServer(t, "--appendonly", "yes", "--maxmemory-policy", "noeviction")
	for _, tc := range []struct {
		name           string
		srv            *testenv.Server
		check          redisstore.EvictionCheck
		refused        bool
		evict, persist int
	}{
		{"evicting, warn", evicting, redisstore.EvictionWarn, false, 1, 1},
		{"evicting, refuse", evicting, redisstore.EvictionRefuse, true, 0, 0},
		{"evicting, ignore", evicting, redisstore.EvictionIgnore, false, 0, 0},
		{"noeviction with AOF", safe, redisstore.EvictionRefuse, false, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &captured{}
			s, err := redisstore.NewStore(tc.srv.Client(t), consumer.WithPrefix(testenv.Prefix(t)),
				redisstore.WithEvictionCheck(tc.check), consumer.WithLogger(slog.New(logs)))
			if tc.refused {
				if !errors.Is(err, consumer.ErrInvalidConfig) || !strings.Contains(err.Error(), "noeviction") ||
					!strings.Contains(err.Error(), tc.srv.Addr) {
					t.Fatalf("NewStore: %v, want a refusal naming the node and noeviction", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Check(ctx); err != nil {
				t.Fatalf("Check: %v", err)
			}
			if got := logs.count("evict"); got != tc.evict {
				t.Fatalf("%d eviction warnings, want %d: %q", got, tc.evict, logs.msgs)
			}
			if got := logs.count("keeps nothing on disk"); got != tc.persist {
				t.Fatalf("%d persistence warnings, want %d: %q", got, tc.persist, logs.msgs)
			}
		})
	}
}

// Check tells a start-up probe, promptly, which address does not answer and
// what to check, whether the server refuses connections or never answers.
func TestCheckNamesTheAddress(t *testing.T) {
	ctx := context.Background()
	px := testenv.NewFaultProxy(t, testenv.RedisAddr(t))
	px.Blackhole()
	refused := testenv.RedisServer(t)
	refused.Stop()
	for _, addr := range []string{refused.Addr, px.Addr()} {
		c := redis.NewClient(&redis.Options{Addr: addr})
		s, err := redisstore.NewStore(c, consumer.WithCallTimeout(500*time.Millisecond))
		if err != nil {
			t.Fatalf("an unreachable Redis must not fail construction: %v", err)
		}
		began := time.Now()
		err = s.Check(ctx)
		took := time.Since(began)
		_ = c.Close()
		if !errors.Is(err, consumer.ErrStoreUnavailable) || !strings.Contains(err.Error(), addr) ||
			!strings.Contains(err.Error(), "check the address") {
			t.Fatalf("Check against %s: %v", addr, err)
		}
		if took > 2*time.Second {
			t.Fatalf("Check took %v with a 500ms call timeout", took)
		}
	}
	if err := newRedisStore(t, testenv.Redis(t)).Check(ctx); err != nil {
		t.Fatalf("Check of a healthy Redis: %v", err)
	}
}
