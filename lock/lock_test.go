package lock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
)

var _ consumer.Locker = (*lock.Locker)(nil)

func TestMain(m *testing.M) {
	if helperMain() {
		return
	}
	testenv.Run(m)
}

// nodes starts n independent private redis-servers.
func nodes(t *testing.T, n int) ([]*testenv.Server, []redis.UniversalClient) {
	t.Helper()
	var srvs []*testenv.Server
	var clients []redis.UniversalClient
	for i := 0; i < n; i++ {
		s := testenv.RedisServer(t)
		c := redis.NewClient(&redis.Options{Addr: s.Addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		srvs, clients = append(srvs, s), append(clients, c)
	}
	return srvs, clients
}

func newLocker(t *testing.T, clients []redis.UniversalClient, opts ...lock.Option) *lock.Locker {
	t.Helper()
	l, err := lock.New(clients, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Three independent nodes: with one stopped a quorum (2) still takes locks; with
// two stopped acquisition fails fast with ErrUnreachable.
func TestQuorumAndFailFast(t *testing.T) {
	srvs, clients := nodes(t, 3)
	// A retry would wait at least half a minute: a failure sooner than that
	// made no retry, however busy the machine.
	const retryDelay = time.Minute
	l := newLocker(t, clients, lock.WithExpiry(2*time.Second), lock.WithTries(5), lock.WithRetryDelay(retryDelay))
	ctx := context.Background()
	ran := 0
	job := func(ctx context.Context) error { ran++; return nil }
	if err := l.Do(ctx, "report-1", job); err != nil {
		t.Fatal(err)
	}
	srvs[0].Stop()
	if err := l.Do(ctx, "report-2", job); err != nil {
		t.Fatalf("one node down: %v", err)
	}
	srvs[1].Stop()
	began := time.Now()
	err := l.Do(ctx, "report-3", job)
	took := time.Since(began)
	var ue *lock.UnreachableError
	if !errors.Is(err, lock.ErrUnreachable) || !errors.As(err, &ue) || ue.Down != 2 || ue.Quorum != 2 || ue.Nodes != 3 {
		t.Fatalf("two nodes down: %v", err)
	}
	if errors.Is(err, lock.ErrNotAcquired) || errors.Is(err, lock.ErrLost) {
		t.Fatalf("unreachable must not look like held or lost: %v", err)
	}
	// Fail fast: one attempt (which the expiry x redsync's timeout factor, 0.05,
	// caps at 100ms), no retries.
	if took >= retryDelay/2 {
		t.Fatalf("failing took %v: it retried", took)
	}
	if ran != 2 {
		t.Fatalf("the job ran %d times, want 2", ran)
	}
	t.Logf("with 2 of 3 nodes down, acquisition failed in %v", took)
}

func TestHeldElsewhere(t *testing.T) {
	_, clients := nodes(t, 1)
	l := newLocker(t, clients, lock.WithExpiry(time.Second), lock.WithTries(3), lock.WithRetryDelay(100*time.Millisecond))
	ctx := context.Background()
	held, release, err := l.Acquire(ctx, "nightly")
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	err = l.Do(ctx, "nightly", func(context.Context) error { t.Error("ran while held elsewhere"); return nil })
	if !errors.Is(err, lock.ErrNotAcquired) || errors.Is(err, lock.ErrUnreachable) {
		t.Fatalf("held elsewhere: %v", err)
	}
	if took := time.Since(began); took < 100*time.Millisecond {
		t.Fatalf("gave up after %v: it did not retry", took)
	}
	_, _, ok, err := l.TryAcquire(ctx, "nightly")
	if ok || err != nil {
		t.Fatalf("TryAcquire while held: %v %v", ok, err)
	}
	release()
	release() // safe twice
	if held.Err() == nil {
		t.Fatal("the held context outlived its release")
	}
	if err := l.Do(ctx, "nightly", func(context.Context) error { return nil }); err != nil {
		t.Fatalf("after release: %v", err)
	}
}

// The lock is taken from under a running job (its key replaced on the node):
// the watchdog's extension fails, the job's context is cancelled with a
// *LostError cause, and Do returns ErrLost wrapping the job's error.
func TestLostWhileRunning(t *testing.T) {
	_, clients := nodes(t, 1)
	// The expiry is long enough for the acquisition's bound (expiry/20) to hold
	// on a busy machine; the lock is lost at its first extension (~1s).
	l := newLocker(t, clients, lock.WithExpiry(3*time.Second))
	ctx := context.Background()
	jobErr := errors.New("report aborted")
	var cause error
	err := l.Do(ctx, "rebuild", func(ctx context.Context) error {
		if err := clients[0].Set(context.Background(), "rebuild", "someone-else", time.Minute).Err(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
			return jobErr
		case <-time.After(time.Minute): // only a hung watchdog takes this long
			return nil
		}
	})
	var lost *lock.LostError
	if !errors.Is(err, lock.ErrLost) || !errors.Is(err, jobErr) || !errors.As(cause, &lost) || lost.Name != "rebuild" {
		t.Fatalf("Do = %v, cause %v; want ErrLost wrapping the job's error, and a *LostError cause", err, cause)
	}
	if v, _ := clients[0].Get(ctx, "rebuild").Result(); v != "someone-else" {
		t.Fatalf("the unlock removed another holder's lock: %q", v)
	}
}

// A 20-second job under a 2-second lock keeps it throughout: the watchdog extends
// it every ~667ms and nobody else can take it meanwhile.
func TestLongJobKeepsLock(t *testing.T) {
	if testing.Short() {
		t.Skip("20-second job")
	}
	_, clients := nodes(t, 3)
	var extensions atomic.Int32
	l := newLocker(t, clients, lock.WithExpiry(2*time.Second), lock.WithOnExtend(func(string) { extensions.Add(1) }))
	other := newLocker(t, clients, lock.WithExpiry(2*time.Second), lock.WithTries(1))
	ctx := context.Background()
	refused := 0
	err := l.Do(ctx, "quarterly-report", func(ctx context.Context) error {
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(time.Second):
			}
			if _, _, ok, err := other.TryAcquire(context.Background(), "quarterly-report"); ok || err != nil {
				return fmt.Errorf("another holder took the lock (ok=%v err=%v)", ok, err)
			}
			refused++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := extensions.Load(); n < 25 || refused < 19 {
		t.Fatalf("%d extensions (want about 30), %d refusals to another holder (want 20)", n, refused)
	}
	t.Logf("20s job, 2s expiry: %d extensions, %d acquisitions refused to another holder", extensions.Load(), refused)
}

func TestInvalidOptions(t *testing.T) {
	_, clients := nodes(t, 1)
	for _, tc := range []struct {
		clients []redis.UniversalClient
		opt     lock.Option
	}{
		{nil, lock.WithTries(1)},
		{[]redis.UniversalClient{nil}, lock.WithTries(1)},
		{clients, lock.WithExpiry(time.Millisecond)},
		{clients, lock.WithTries(0)},
		{clients, lock.WithRetryDelay(0)},
	} {
		if _, err := lock.New(tc.clients, tc.opt); !errors.Is(err, lock.ErrConfig) {
			t.Errorf("New(%v): %v, want ErrConfig", tc.clients, err)
		}
	}
}

// With WithLock, a started record claimed under the lock whose holder's lock is
// gone is taken over at once (fence +1), long before its 30-second record lease
// runs out; while the lock is held elsewhere the result is IN_PROGRESS and the
// record is left alone. A record claimed without the lock (a worker configured
// without WithLock) is never forced: its owner may be alive and renewing.
func TestConsumerTakesOverWithoutWaitingForTheLease(t *testing.T) {
	_, clients := nodes(t, 1)
	l := newLocker(t, clients, lock.WithExpiry(time.Second), lock.WithTries(1))
	rdb := testenv.Redis(t)
	store, err := redisstore.NewStore(rdb, consumer.WithPrefix(testenv.Prefix(t)), consumer.WithLease(30*time.Second),
		consumer.WithLock(l))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := consumer.Key("invoice-7")
	if rep := store.Begin(ctx, []consumer.Claim{{Key: key, Owner: "crashed", Locked: true}})[0]; !rep.Claimed() {
		t.Fatalf("claim: %+v", rep)
	}
	// The crashed owner's lock is still held for a moment: nothing runs.
	_, release, _, err := l.TryAcquire(ctx, store.Settings().LockName(key))
	if err != nil {
		t.Fatal(err)
	}
	r := consumer.ExecuteIdempotently(ctx, store, key, nil, func(ctx context.Context) (string, error) {
		t.Error("ran while the lock was held elsewhere")
		return "", nil
	})
	if r.Outcome != consumer.InProgress {
		t.Fatalf("while the lock is held: %v %v", r.Outcome, r.Err)
	}
	if rec, _ := store.Peek(ctx, key); rec.Owner != "crashed" || rec.Fence != 1 || rec.Attempts != 1 {
		t.Fatalf("the record was changed while the lock was held elsewhere: %+v", rec)
	}
	release() // the holder is gone
	began := time.Now()
	var fence int64
	r = consumer.ExecuteIdempotently(ctx, store, key, nil, func(ctx context.Context) (string, error) {
		fence, _ = consumer.FenceFromContext(ctx)
		return "sent", nil
	})
	if r.Outcome != consumer.Success || fence != 2 || r.Fence != 2 {
		t.Fatalf("takeover: %v %v fence %d", r.Outcome, r.Err, fence)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("takeover took %v", took)
	}
	if r := consumer.ExecuteIdempotently(ctx, store, key, nil, func(ctx context.Context) (string, error) { return "again", nil }); r.Outcome != consumer.Duplicate || r.Value != "sent" {
		t.Fatalf("after: %v %q", r.Outcome, r.Value)
	}
	// A live claim made without the lock waits out its lease, lock or no lock.
	plain := consumer.Key("invoice-8")
	if rep := store.Begin(ctx, []consumer.Claim{{Key: plain, Owner: "no-lock-worker"}})[0]; !rep.Claimed() {
		t.Fatalf("claim without the lock: %+v", rep)
	}
	r = consumer.ExecuteIdempotently(ctx, store, plain, nil, func(ctx context.Context) (string, error) {
		t.Error("forced over a claim made without the lock")
		return "", nil
	})
	if r.Outcome != consumer.InProgress || r.LeaseLeft <= 0 {
		t.Fatalf("over a claim made without the lock: %v %v lease left %v", r.Outcome, r.Err, r.LeaseLeft)
	}
	if rec, _ := store.Peek(ctx, plain); rec.Owner != "no-lock-worker" || rec.Fence != 1 || rec.Attempts != 1 {
		t.Fatalf("a claim made without the lock was changed: %+v", rec)
	}
	// Unreachable lock nodes fail closed.
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer dead.Close()
	nowhere := newLocker(t, []redis.UniversalClient{dead}, lock.WithExpiry(time.Second))
	s2, _ := redisstore.NewStore(rdb, consumer.WithPrefix(testenv.Prefix(t)), consumer.WithLock(nowhere))
	r = consumer.ExecuteIdempotently(ctx, s2, "k", nil, func(ctx context.Context) (string, error) { t.Error("ran unguarded"); return "", nil })
	if !errors.Is(r.Err, consumer.ErrStoreUnavailable) || !errors.Is(r.Err, lock.ErrUnreachable) || !r.Retryable() {
		t.Fatalf("lock nodes down: %v %v", r.Outcome, r.Err)
	}
}
