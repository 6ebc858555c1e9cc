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

// partitionRun is one worker A cut off from Redis while its handler runs, and a
// worker B that takes the key over once the lease has run out on the server.
type partitionRun struct {
	aCancelled, bStarted time.Time
	aRuns, bRuns         int32
	aResult              consumer.Result[string]
	final                consumer.Result[string]
}

func runPartition(t *testing.T, lease time.Duration, key consumer.Key) partitionRun {
	addr := testenv.RedisAddr(t)
	prefix := testenv.Prefix(t)
	px := testenv.NewFaultProxy(t, addr)
	ca := redis.NewClient(&redis.Options{Addr: px.Addr()}) // default options: ignores context deadlines
	cb := redis.NewClient(&redis.Options{Addr: addr})
	defer ca.Close()
	defer cb.Close()
	opts := []consumer.Option{consumer.WithPrefix(prefix), consumer.WithLease(lease)}
	storeA, err := redisstore.NewStore(ca, opts...)
	if err != nil {
		t.Fatal(err)
	}
	storeB, err := redisstore.NewStore(cb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var run partitionRun
	var aRuns, bRuns atomic.Int32
	started := make(chan struct{})
	aDone := make(chan consumer.Result[string], 1)
	go func() {
		aDone <- consumer.ExecuteIdempotently(ctx, storeA, key, nil, func(hctx context.Context) (string, error) {
			aRuns.Add(1)
			px.Blackhole() // A can no longer reach Redis; its calls hang
			close(started)
			<-hctx.Done()
			run.aCancelled = time.Now()
			return "", context.Cause(hctx)
		})
	}()
	<-started
	giveUp := time.Now().Add(time.Minute + lease)
	for {
		ran := false
		r := consumer.ExecuteIdempotently(ctx, storeB, key, nil, func(hctx context.Context) (string, error) {
			run.bStarted = time.Now()
			bRuns.Add(1)
			ran = true
			return "b", nil
		})
		if r.Outcome == consumer.Success {
			break
		}
		if r.Outcome != consumer.InProgress && !redeliver(r, ran) || time.Now().After(giveUp) {
			t.Errorf("B: %v %v", r.Outcome, r.Err)
			return run
		}
		time.Sleep(min(r.LeaseLeft+time.Millisecond, 20*time.Millisecond))
	}
	run.aResult = <-aDone // A's cancellation was recorded before ExecuteIdempotently returned
	px.Pass()
	run.aRuns, run.bRuns = aRuns.Load(), bRuns.Load()
	run.final = consumer.ExecuteIdempotently(ctx, storeB, key, nil, func(context.Context) (string, error) {
		return "again", nil
	})
	return run
}

// A worker partitioned from Redis (its calls hang: no error ever comes back) has
// its handler cancelled before another worker's handler starts on the same key,
// for short and default leases, in every one of 20 runs each.
func TestPartitionedOwnerStopsBeforeTakeover(t *testing.T) {
	for _, lease := range []time.Duration{600 * time.Millisecond, 1500 * time.Millisecond, consumer.DefaultLease} {
		t.Run(lease.String(), func(t *testing.T) {
			if testing.Short() && lease > 2*time.Second {
				t.Skip("a 30s lease in -short mode")
			}
			const runs = 20
			var wg sync.WaitGroup
			results := make([]partitionRun, runs)
			for i := range runs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					results[i] = runPartition(t, lease, consumer.Key(fmt.Sprint("job-", i)))
				}()
			}
			wg.Wait()
			var leads []time.Duration
			for i, r := range results {
				switch {
				case r.aCancelled.IsZero() || r.bStarted.IsZero():
					t.Fatalf("run %d: A cancelled at %v, B started at %v", i, r.aCancelled, r.bStarted)
				case !r.aCancelled.Before(r.bStarted):
					t.Errorf("run %d: A's handler was still live %v after B's started", i, r.aCancelled.Sub(r.bStarted))
				}
				var ll *consumer.LeaseLostError
				if r.aResult.Outcome != consumer.Error || !errors.As(r.aResult.Err, &ll) || ll.Fence != 1 {
					t.Errorf("run %d: A = %v %v, want a lease lost at fence 1", i, r.aResult.Outcome, r.aResult.Err)
				}
				if r.aRuns != 1 || r.bRuns != 1 || r.final.Outcome != consumer.Duplicate || r.final.Value != "b" {
					t.Errorf("run %d: handler runs A %d B %d, then %v %q; want 1, 1, DUPLICATE b", i, r.aRuns, r.bRuns,
						r.final.Outcome, r.final.Value)
				}
				leads = append(leads, r.bStarted.Sub(r.aCancelled))
			}
			t.Logf("lease %v: A stopped ahead of B's start by %v .. %v (margin %v)", lease,
				minDur(leads).Round(time.Millisecond), maxDur(leads).Round(time.Millisecond), consumer.LeaseMargin(lease))
		})
	}
}

func minDur(ds []time.Duration) time.Duration {
	m := ds[0]
	for _, d := range ds {
		m = min(m, d)
	}
	return m
}

func maxDur(ds []time.Duration) time.Duration {
	m := ds[0]
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// A reply lost after Redis ran the command makes go-redis send the command again
// with the same owner token; every transition answers as the first call did, so
// the handler runs once and its outcome stands.
func TestLostRepliesAreAnsweredAgain(t *testing.T) {
	for _, tc := range []struct {
		name   string
		arm    string // begin: before the claim; settle: in the handler, before its completion
		herr   error
		want   consumer.Outcome
		target error
		state  string
	}{
		{"begin", "begin", nil, consumer.Success, nil, "completed"},
		{"complete", "settle", nil, consumer.Success, nil, "completed"},
		{"fail", "settle", errors.New("downstream said no"), consumer.Error, nil, "retry"},
		{"fail permanently", "settle", consumer.Permanent(errors.New("card declined")), consumer.Error, consumer.ErrPermanent, "failed"},
		{"release", "settle", consumer.Abandon(errors.New("upstream 502")), consumer.Error, consumer.ErrAbandoned, "retry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			px := testenv.NewFaultProxy(t, testenv.RedisAddr(t))
			c := redis.NewClient(&redis.Options{Addr: px.Addr()}) // go-redis retries on a broken connection
			defer c.Close()
			s := newRedisStore(t, c)
			ctx := context.Background()
			if err := s.Load(ctx); err != nil { // so the dropped reply is the script's
				t.Fatal(err)
			}
			if tc.arm == "begin" {
				px.DropNextReply()
			}
			var runs atomic.Int32
			r := consumer.ExecuteIdempotently(ctx, s, "pay-1", nil, func(ctx context.Context) (int, error) {
				runs.Add(1)
				if tc.arm == "settle" {
					px.DropNextReply()
				}
				return 1, tc.herr
			})
			if r.Outcome != tc.want || (tc.herr != nil && !errors.Is(r.Err, tc.herr)) ||
				(tc.target != nil && !errors.Is(r.Err, tc.target)) || errors.Is(r.Err, consumer.ErrLeaseLost) {
				t.Fatalf("outcome %v (%v), want %v with the handler's own error", r.Outcome, r.Err, tc.want)
			}
			rec, err := s.Peek(ctx, "pay-1")
			if err != nil || runs.Load() != 1 || rec.State != tc.state || r.Attempt != 1 {
				t.Fatalf("runs %d attempt %d, record %s (%v); want 1 run, attempt 1, %s", runs.Load(), r.Attempt, rec.State, err, tc.state)
			}
		})
	}
}

// Redis refuses connections for 600 ms right when the handler returns: the
// completion is sent again while the claim is live, and the handler never runs
// a second time.
func TestCompletionOutlivesAStoreBlip(t *testing.T) {
	for _, perMessage := range []bool{false, true} {
		t.Run(fmt.Sprint("per-message=", perMessage), func(t *testing.T) {
			px := testenv.NewFaultProxy(t, testenv.RedisAddr(t))
			c := redis.NewClient(&redis.Options{Addr: px.Addr(), MaxRetries: -1})
			defer c.Close()
			s := newRedisStore(t, c, consumer.WithLease(2*time.Second))
			ctx := context.Background()
			var runs atomic.Int32
			fn := func(ctx context.Context, _ int, _ consumer.BatchItem) (string, error) {
				if runs.Add(1) == 1 {
					px.Refuse()
					time.AfterFunc(600*time.Millisecond, px.Pass)
				}
				return "charged", nil
			}
			items := []consumer.BatchItem{{Key: "charge-1"}}
			r := consumer.ExecuteBatch(ctx, s, items, fn, consumer.WithPerMessageCompletion(perMessage))[0]
			if r.Outcome != consumer.Success {
				t.Fatalf("first delivery: %v %v", r.Outcome, r.Err)
			}
			again := consumer.ExecuteBatch(ctx, s, items, fn)[0]
			if again.Outcome != consumer.Duplicate || again.Value != "charged" || runs.Load() != 1 {
				t.Fatalf("redelivery: %v %q after %d runs; want DUPLICATE after 1", again.Outcome, again.Value, runs.Load())
			}
		})
	}
}

// panicky's MarshalJSON has a bug: it panics.
type panicky struct{ rows []int }

func (p panicky) MarshalJSON() ([]byte, error) { return []byte{byte(p.rows[3])}, nil }

// A panic while encoding the result (user code) is contained: the operation is
// recorded as done with its result dropped, the heartbeat stops, and a
// concurrent batch does not take the process down.
func TestEncodingPanicIsContained(t *testing.T) {
	s := newRedisStore(t, testenv.Redis(t), consumer.WithLease(300*time.Millisecond))
	ctx := context.Background()
	var runs atomic.Int32
	items := make([]consumer.BatchItem, 8)
	for i := range items {
		items[i] = consumer.BatchItem{Key: consumer.Key(fmt.Sprint("report-", i))}
	}
	res := consumer.ExecuteBatch(ctx, s, items, func(ctx context.Context, i int, _ consumer.BatchItem) (panicky, error) {
		runs.Add(1)
		return panicky{}, nil
	}, consumer.WithConcurrency(4), consumer.WithPerMessageCompletion(true))
	for i, r := range res {
		if r.Outcome != consumer.Success || !r.ResultDropped {
			t.Fatalf("item %d: %v %v dropped=%v, want a success whose result was not kept", i, r.Outcome, r.Err, r.ResultDropped)
		}
	}
	for i := range items {
		dup := consumer.ExecuteIdempotently(ctx, s, items[i].Key, nil, func(context.Context) (panicky, error) {
			runs.Add(1)
			return panicky{}, nil
		})
		if dup.Outcome != consumer.Duplicate || !errors.Is(dup.Err, consumer.ErrUndecodableResult) {
			t.Fatalf("duplicate %d: %v %v", i, dup.Outcome, dup.Err)
		}
	}
	if runs.Load() != int32(len(items)) {
		t.Fatalf("handler runs %d, want %d", runs.Load(), len(items))
	}
}

// panicStore is a Store whose Settle panics (a bug in a user's store wrapper).
type panicStore struct{ consumer.Store }

func (panicStore) Settle(context.Context, []consumer.Settlement) []consumer.SettleReply {
	panic("settle is broken")
}

// A panic while settling one item of a concurrent batch becomes that item's
// error instead of killing the process, and every claim's heartbeat stops.
func TestSettlePanicIsContained(t *testing.T) {
	base := newRedisStore(t, testenv.Redis(t), consumer.WithLease(300*time.Millisecond))
	items := []consumer.BatchItem{{Key: "a"}, {Key: "b"}, {Key: "c"}}
	for _, perMessage := range []bool{true, false} {
		for i := range items {
			items[i].Key += consumer.Key(fmt.Sprint(perMessage))
		}
		res := consumer.ExecuteBatch(context.Background(), panicStore{base}, items,
			func(context.Context, int, consumer.BatchItem) (int, error) { return 1, nil },
			consumer.WithConcurrency(3), consumer.WithPerMessageCompletion(perMessage))
		for i, r := range res {
			if r.Outcome != consumer.Error || !errors.Is(r.Err, consumer.ErrHandlerPanic) {
				t.Fatalf("per-message %v item %d: %v %v, want the panic as its error", perMessage, i, r.Outcome, r.Err)
			}
		}
	}
}

// A nil store of a concrete type answers with ErrInvalidConfig everywhere.
func TestNilStores(t *testing.T) {
	var rs *redisstore.Store
	var ms *memory.Store
	ctx := context.Background()
	for _, s := range []consumer.Store{rs, ms} {
		r := consumer.ExecuteIdempotently(ctx, s, "k", nil, func(context.Context) (int, error) {
			t.Fatal("ran on a nil store")
			return 0, nil
		})
		if r.Outcome != consumer.Error || !errors.Is(r.Err, consumer.ErrInvalidConfig) {
			t.Fatalf("%T: %v %v", s, r.Outcome, r.Err)
		}
		if rep := s.Begin(ctx, []consumer.Claim{{Key: "k", Owner: "o"}}); !errors.Is(rep[0].Err, consumer.ErrInvalidConfig) {
			t.Fatalf("%T Begin: %+v", s, rep)
		}
		if rep := s.Settle(ctx, []consumer.Settlement{{Key: "k", Owner: "o"}}); !errors.Is(rep[0].Err, consumer.ErrInvalidConfig) {
			t.Fatalf("%T Settle: %+v", s, rep)
		}
		if err := s.Extend(ctx, []consumer.Owned{{Key: "k"}})[0]; !errors.Is(err, consumer.ErrInvalidConfig) {
			t.Fatalf("%T Extend: %v", s, err)
		}
		if err := s.Release(ctx, []consumer.Owned{{Key: "k"}})[0]; !errors.Is(err, consumer.ErrInvalidConfig) {
			t.Fatalf("%T Release: %v", s, err)
		}
		if _, err := s.Peek(ctx, "k"); !errors.Is(err, consumer.ErrInvalidConfig) {
			t.Fatalf("%T Peek: %v", s, err)
		}
	}
	if err := rs.Check(ctx); !errors.Is(err, consumer.ErrInvalidConfig) {
		t.Fatalf("Check on a nil store: %v", err)
	}
}

// A panic while encoding the result of one ExecuteIdempotently call does not
// escape to the caller: the key is recorded as done with its result dropped, so
// no heartbeat is left renewing a claim nobody will settle.
func TestEncodingPanicOfOneCallIsContained(t *testing.T) {
	s := newRedisStore(t, testenv.Redis(t), consumer.WithLease(300*time.Millisecond))
	ctx := context.Background()
	var r consumer.Result[panicky]
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("the encoding panic reached the caller: %v", p)
			}
		}()
		r = consumer.ExecuteIdempotently(ctx, s, "report", nil, func(context.Context) (panicky, error) { return panicky{}, nil })
	}()
	if r.Outcome != consumer.Success || !r.ResultDropped {
		t.Errorf("%v %v dropped=%v, want a success whose result was not kept", r.Outcome, r.Err, r.ResultDropped)
	}
	if rec, err := s.Peek(ctx, "report"); err != nil || rec.State != "completed" {
		t.Fatalf("record %s (%v) after the call returned, want completed", rec.State, err)
	}
}
