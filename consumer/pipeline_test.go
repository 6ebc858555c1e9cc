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
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/memory"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
)

func pipelineStores(t *testing.T, opts ...consumer.Option) map[string]consumer.Store {
	return map[string]consumer.Store{
		"redis":  newRedisStore(t, testenv.Redis(t), opts...),
		"memory": must(memory.NewStore(opts...)),
	}
}

// 64 goroutines submit 1,000 keys 5 times each through one pipeline: every key's
// handler runs exactly once, every message is answered exactly once.
func TestPipelineExactlyOnce(t *testing.T) {
	for name, s := range pipelineStores(t) {
		t.Run(name, func(t *testing.T) {
			const keys, deliveries, senders = 1000, 5, 64
			ctx := context.Background()
			p, err := consumer.NewPipeline[string](ctx, s, consumer.WithConcurrency(32), consumer.WithInFlight(128))
			if err != nil {
				t.Fatal(err)
			}
			runs := make([]atomic.Int32, keys)
			res := newResults[string]()
			work := make(chan int)
			go func() {
				for d := 0; d < deliveries; d++ {
					for i := 0; i < keys; i++ {
						work <- i
					}
				}
				close(work)
			}()
			var senderWG sync.WaitGroup
			for w := 0; w < senders; w++ {
				senderWG.Add(1)
				go func() {
					defer senderWG.Done()
					for i := range work {
						k := consumer.Key(fmt.Sprint("order-", i))
						if err := p.Submit(ctx, res.item(k, func(ctx context.Context) (string, error) {
							runs[i].Add(1)
							return "charged " + string(k), nil
						})); err != nil {
							t.Error(err)
						}
					}
				}()
			}
			senderWG.Wait()
			res.finish(ctx, t, p)
			for i := range runs {
				if n := runs[i].Load(); n != 1 {
					t.Fatalf("key %d ran %d times", i, n)
				}
			}
			if n := res.done.Load(); n != keys*deliveries {
				t.Fatalf("%d answers, want %d", n, keys*deliveries)
			}
			for k, rs := range res.got {
				succ := 0
				for _, r := range rs {
					switch r.Outcome {
					case consumer.Success:
						succ++
					case consumer.Duplicate:
						if r.Value != "charged "+string(k) {
							t.Fatalf("%s: duplicate value %q", k, r.Value)
						}
					default:
						t.Fatalf("%s: %v %v", k, r.Outcome, r.Err)
					}
				}
				if succ != 1 || len(rs) != deliveries {
					t.Fatalf("%s: %d successes of %d answers", k, succ, len(rs))
				}
			}
		})
	}
}

// No more handlers run at once than WithConcurrency allows, and the pipeline fills
// them: 200 messages whose handlers wait keep 16 slots busy.
func TestPipelineHandlerBound(t *testing.T) {
	ctx := context.Background()
	s := newRedisStore(t, testenv.Redis(t))
	p, err := consumer.NewPipeline[int](ctx, s, consumer.WithConcurrency(16), consumer.WithInFlight(64))
	if err != nil {
		t.Fatal(err)
	}
	var running, peak atomic.Int32
	release := make(chan struct{})
	res := newResults[int]()
	go func() {
		testenv.Eventually(t, 10*time.Second, "16 handlers running", func() bool { return running.Load() == 16 })
		close(release)
	}()
	for i := 0; i < 200; i++ {
		if err := p.Submit(ctx, res.item(consumer.Key(fmt.Sprint("job-", i)), func(ctx context.Context) (int, error) {
			n := running.Add(1)
			for {
				old := peak.Load()
				if n <= old || peak.CompareAndSwap(old, n) {
					break
				}
			}
			<-release
			running.Add(-1)
			return 1, nil
		})); err != nil {
			t.Fatal(err)
		}
	}
	res.finish(ctx, t, p)
	if peak.Load() != 16 {
		t.Fatalf("at most %d handlers ran at once, want 16", peak.Load())
	}
	for k, rs := range res.got {
		if len(rs) != 1 || rs[0].Outcome != consumer.Success {
			t.Fatalf("%s: %+v", k, rs)
		}
	}
}

// A pipeline cut off from Redis stops its running handlers before another worker
// can take their keys over, and settles none of them.
func TestPipelinePartitionedStopsBeforeTakeover(t *testing.T) {
	lease := 600 * time.Millisecond
	addr := testenv.RedisAddr(t)
	prefix := testenv.Prefix(t)
	px := testenv.NewFaultProxy(t, addr)
	ca := redis.NewClient(&redis.Options{Addr: px.Addr()})
	defer ca.Close()
	storeA := must(redisstore.NewStore(ca, consumer.WithPrefix(prefix), consumer.WithLease(lease)))
	storeB := newRedisStoreAt(t, addr, consumer.WithPrefix(prefix), consumer.WithLease(lease))
	ctx := context.Background()
	p, err := consumer.NewPipeline[string](ctx, storeA)
	if err != nil {
		t.Fatal(err)
	}
	const n = 10
	var mu sync.Mutex
	cancelled := map[consumer.Key]time.Time{}
	var started sync.WaitGroup
	started.Add(n)
	res := newResults[string]()
	for i := 0; i < n; i++ {
		k := consumer.Key(fmt.Sprint("job-", i))
		if err := p.Submit(ctx, res.item(k, func(hctx context.Context) (string, error) {
			started.Done()
			<-hctx.Done()
			mu.Lock()
			cancelled[k] = time.Now()
			mu.Unlock()
			return "", context.Cause(hctx)
		})); err != nil {
			t.Fatal(err)
		}
	}
	started.Wait()
	px.Blackhole()
	giveUp := time.Now().Add(time.Minute + time.Duration(n)*lease)
	for i := 0; i < n; i++ {
		k := consumer.Key(fmt.Sprint("job-", i))
		for {
			var bStart time.Time
			r := consumer.ExecuteIdempotently(ctx, storeB, k, []byte(k), func(context.Context) (string, error) {
				bStart = time.Now()
				return "b", nil
			})
			if r.Outcome != consumer.Success && r.Outcome != consumer.InProgress && !redeliver(r, !bStart.IsZero()) ||
				time.Now().After(giveUp) {
				t.Fatalf("%s: B got %v %v", k, r.Outcome, r.Err)
			}
			if r.Outcome == consumer.Success {
				mu.Lock()
				a, ok := cancelled[k]
				mu.Unlock()
				if !ok || !a.Before(bStart) {
					t.Fatalf("%s: A's handler was live when B's started (A cancelled %v)", k, a)
				}
				break
			}
			time.Sleep(min(r.LeaseLeft+time.Millisecond, 20*time.Millisecond))
		}
	}
	res.wg.Wait()
	px.Pass()
	for k, rs := range res.got {
		if len(rs) != 1 || !errors.Is(rs[0].Err, consumer.ErrLeaseLost) {
			t.Fatalf("%s: %+v, want a lease lost", k, rs)
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := p.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
}

func newRedisStoreAt(t *testing.T, addr string, opts ...consumer.Option) *redisstore.Store {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return must(redisstore.NewStore(c, opts...))
}

// Shutdown waits for running handlers until its context ends, then cancels them:
// their claims are released uncounted, and messages not yet started are answered
// ErrNotRun; nothing is lost and nothing runs later.
func TestPipelineShutdown(t *testing.T) {
	for name, s := range pipelineStores(t, consumer.WithMaxAttempts(1)) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			p, err := consumer.NewPipeline[int](ctx, s, consumer.WithConcurrency(2), consumer.WithInFlight(10))
			if err != nil {
				t.Fatal(err)
			}
			var ran atomic.Int32
			var begun sync.Map // keys whose handler started
			res := newResults[int]()
			started := make(chan struct{}, 2)
			for i := 0; i < 6; i++ {
				k := consumer.Key(fmt.Sprint("slow-", i))
				if err := p.Submit(ctx, res.item(k, func(hctx context.Context) (int, error) {
					begun.Store(k, true)
					ran.Add(1)
					started <- struct{}{}
					<-hctx.Done()
					return 0, hctx.Err()
				})); err != nil {
					t.Fatal(err)
				}
			}
			<-started
			<-started
			sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			if err := p.Shutdown(sctx); err != nil {
				t.Fatal(err)
			}
			if err := p.Submit(ctx, res.item("late", func(context.Context) (int, error) { return 0, nil })); !errors.Is(err, consumer.ErrPipelineStopped) {
				t.Fatalf("Submit after Shutdown: %v", err)
			}
			res.wg.Done() // the late item was never taken
			if ran.Load() != 2 || res.done.Load() != 6 {
				t.Fatalf("%d handlers ran, %d answers; want 2 and 6", ran.Load(), res.done.Load())
			}
			for i := 0; i < 6; i++ {
				k := consumer.Key(fmt.Sprint("slow-", i))
				rs := res.got[k]
				want := consumer.ErrNotRun
				if _, ok := begun.Load(k); ok {
					want = consumer.ErrInterrupted // started, cut short by the shutdown
				}
				if len(rs) != 1 || !errors.Is(rs[0].Err, want) || !rs[0].Retryable() || !consumer.NotAnAttempt(rs[0].Err) {
					t.Fatalf("%s: %+v, want one %v", k, rs, want)
				}
				// The one attempt allowed is still there.
				r := consumer.ExecuteIdempotently(ctx, s, k, []byte(k), func(context.Context) (int, error) { return 7, nil })
				if r.Outcome != consumer.Success || r.Attempt != 1 {
					t.Fatalf("%s after shutdown: %v %v attempt %d", k, r.Outcome, r.Err, r.Attempt)
				}
			}
		})
	}
}

// Bad input is answered, never a panic: an invalid key, a nil handler, options out
// of range, a store with a lock.
func TestPipelineBadInput(t *testing.T) {
	ctx := context.Background()
	s := must(memory.NewStore())
	for _, opts := range [][]consumer.PipelineOption{{consumer.WithConcurrency(0)}, {consumer.WithInFlight(-1)}, {nil}} {
		if _, err := consumer.NewPipeline[int](ctx, s, opts...); !errors.Is(err, consumer.ErrInvalidConfig) {
			t.Fatalf("options %v: %v", opts, err)
		}
	}
	if _, err := consumer.NewPipeline[int](ctx, nil); !errors.Is(err, consumer.ErrInvalidConfig) {
		t.Fatalf("nil store: %v", err)
	}
	locked := must(memory.NewStore(consumer.WithLock(fixedLock(true))))
	if _, err := consumer.NewPipeline[int](ctx, locked); !errors.Is(err, consumer.ErrInvalidConfig) {
		t.Fatalf("store with a lock: %v", err)
	}
	p, err := consumer.NewPipeline[int](ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Submit(ctx, consumer.PipelineItem[int]{Key: "k"}); !errors.Is(err, consumer.ErrInvalidConfig) {
		t.Fatalf("item without Run: %v", err)
	}
	res := newResults[int]()
	if err := p.Submit(ctx, res.item("", func(context.Context) (int, error) { return 1, nil })); err != nil {
		t.Fatal(err)
	}
	res.finish(ctx, t, p)
	if r := res.got[""]; len(r) != 1 || !errors.Is(r[0].Err, consumer.ErrInvalidKey) {
		t.Fatalf("invalid key: %+v", r)
	}
}

// With WithFailOpen, a pipeline whose store is down runs each message once,
// unguarded and marked so; without it, nothing runs and every message is answered
// store-unavailable.
func TestPipelineStoreDown(t *testing.T) {
	for _, open := range []bool{false, true} {
		t.Run(fmt.Sprint("fail-open=", open), func(t *testing.T) {
			px := testenv.NewFaultProxy(t, testenv.RedisAddr(t))
			c := redis.NewClient(&redis.Options{Addr: px.Addr(), MaxRetries: -1})
			defer c.Close()
			s := must(redisstore.NewStore(c, consumer.WithPrefix(testenv.Prefix(t)), consumer.WithFailOpen(open),
				consumer.WithCallTimeout(300*time.Millisecond)))
			px.Refuse()
			ctx := context.Background()
			p, err := consumer.NewPipeline[int](ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int32
			res := newResults[int]()
			for i := 0; i < 20; i++ {
				_ = p.Submit(ctx, res.item(consumer.Key(fmt.Sprint("k", i)), func(context.Context) (int, error) { runs.Add(1); return 1, nil }))
			}
			res.finish(ctx, t, p)
			for k, rs := range res.got {
				r := rs[0]
				switch {
				case len(rs) != 1:
					t.Fatalf("%s answered %d times", k, len(rs))
				case open && (r.Outcome != consumer.Success || !r.Unguarded):
					t.Fatalf("%s: %v %v unguarded=%v", k, r.Outcome, r.Err, r.Unguarded)
				case !open && !errors.Is(r.Err, consumer.ErrStoreUnavailable):
					t.Fatalf("%s: %v %v", k, r.Outcome, r.Err)
				}
			}
			if want := map[bool]int32{true: 20, false: 0}[open]; runs.Load() != want {
				t.Fatalf("%d handler runs, want %d", runs.Load(), want)
			}
		})
	}
}
