package lock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// cancelClock records when a holder's context was cancelled, from the
// context.AfterFunc goroutine (which can only run after the cancellation).
type cancelClock struct{ at atomic.Int64 }

func watchCancel(held context.Context) (*cancelClock, func() bool) {
	c := &cancelClock{}
	stop := context.AfterFunc(held, func() { c.at.Store(time.Now().UnixNano()) })
	return c, stop
}

// when waits (with a deadline) for the recorded cancellation time.
func (c *cancelClock) when(within time.Duration) (time.Time, bool) {
	deadline := time.Now().Add(within)
	for c.at.Load() == 0 {
		if time.Now().After(deadline) {
			return time.Time{}, false
		}
		time.Sleep(time.Millisecond)
	}
	return time.Unix(0, c.at.Load()), true
}

// timerLag measures how late this process's timers fire: a goroutine sleeps a
// millisecond at a time and keeps the largest overshoot it has seen. A
// watchdog's timer, in the same process, is as late as these on a starved
// machine; the lag is measured, never guessed.
type timerLag struct {
	worst atomic.Int64 // nanoseconds
	last  atomic.Int64 // when the probe last woke, unix nanoseconds
	stop  chan struct{}
	done  chan struct{}
}

func startTimerLag(t *testing.T) *timerLag {
	l := &timerLag{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			began := time.Now()
			time.Sleep(time.Millisecond)
			now := time.Now()
			if over := now.Sub(began) - time.Millisecond; over > time.Duration(l.worst.Load()) {
				l.worst.Store(int64(over))
			}
			l.last.Store(now.UnixNano())
		}
	}()
	t.Cleanup(func() { close(l.stop); <-l.done })
	return l
}

// worstSince returns the largest lag seen, once the probe has woken after at
// (so a lag that spans at is counted).
func (l *timerLag) worstSince(at time.Time, within time.Duration) time.Duration {
	deadline := time.Now().Add(within)
	for l.last.Load() <= at.UnixNano() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	return time.Duration(l.worst.Load())
}

// errVoid: a run that proves nothing about a partition, because A never held the
// lock with a live context up to the moment its link was cut (a busy machine
// delayed A's acquisition or its extensions past their bounds, or kept A's
// watchdog from running when its timer fired). It is run again.
var errVoid = errors.New("holder A did not hold the lock up to the partition")

// partitionRun is one run of the partition proof: holder A (through px) takes
// name, lets extensions pass, then its link is blackholed; holder B polls the
// node directly until it gets the lock. The safety assertion is an ordering seen
// in this process: when B's acquisition returns, A's context is already
// cancelled (with a *LostError). No step depends on how fast the machine is: A
// either extends or loses the lock (a void run), B's calls that get no answer
// within their bound are tried again, a cancellation that came after B's
// acquisition by no more than this process's timers were measured to lag is a
// starved watchdog (a void run; later than that fails), and the deadlines below
// only stop a hung run. It returns A's lead over B as the clocks read it (informative: the
// reading of A's cancellation can lag it on a busy machine) and how many of B's
// calls went unanswered.
func partitionRun(la, lb *lock.Locker, extended *atomic.Int32, px *testenv.FaultProxy, lag *timerLag, name string, expiry time.Duration, extensions int32) (time.Duration, int, error) {
	const hung = time.Minute // only a hung run takes this long, however busy the machine
	ctx := context.Background()
	held, release, err := la.Acquire(ctx, name)
	if errors.Is(err, lock.ErrUnreachable) {
		return 0, 0, fmt.Errorf("%w: its acquisition got no answer in time: %v", errVoid, err)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("A's acquisition: %w", err)
	}
	defer release()
	clock, stop := watchCancel(held)
	defer stop()
	deadline := time.Now().Add(hung)
	for extended.Load() < extensions {
		if held.Err() != nil {
			return 0, 0, fmt.Errorf("%w: it lost the lock after %d of %d extensions: %v", errVoid, extended.Load(), extensions, context.Cause(held))
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("A neither extended the lock nor lost it within %v", hung)
		}
		time.Sleep(5 * time.Millisecond)
	}
	px.Blackhole()
	defer px.Pass() // before the release (deferred earlier), so A's unlock can reach the node
	if held.Err() != nil {
		return 0, 0, fmt.Errorf("%w: it lost the lock before the partition: %v", errVoid, context.Cause(held))
	}
	poll := min(expiry/60, 50*time.Millisecond)
	unanswered := 0
	deadline = time.Now().Add(expiry + hung)
	for {
		_, rb, ok, err := lb.TryAcquire(ctx, name)
		if errors.Is(err, lock.ErrUnreachable) {
			unanswered++ // B's link is healthy; on a busy machine its answer can miss the bound
		} else if err != nil {
			return 0, unanswered, fmt.Errorf("B's acquisition: %w", err)
		}
		if ok {
			bAt := time.Now()
			aLive := held.Err() == nil
			rb()
			if aLive {
				// A's watchdog cancels A a margin before the lock runs out on
				// the node; it can only be late by as much as the process's
				// timers are (a starved process). Later than that is a fault.
				aAt, ok := clock.when(hung)
				if !ok {
					return 0, unanswered, errors.New("B acquired the lock while A's context was live, and A was never cancelled")
				}
				late, worst := aAt.Sub(bAt), lag.worstSince(aAt, hung)
				if late <= 2*worst { // the watchdog's timer, then the goroutine that read the clock
					return 0, unanswered, fmt.Errorf("%w: A was cancelled %v after B acquired, within what this process's timers lagged (up to %v)",
						errVoid, late, worst)
				}
				return 0, unanswered, fmt.Errorf("B acquired the lock while A's context was still live: A was cancelled %v later, "+
					"more than twice this process's worst timer lag (%v)", late, worst)
			}
			var lost *lock.LostError
			if !errors.As(context.Cause(held), &lost) || lost.Name != name {
				return 0, unanswered, fmt.Errorf("A's cause is %v, want a *LostError for %q", context.Cause(held), name)
			}
			aAt, ok := clock.when(hung)
			if !ok {
				return 0, unanswered, errors.New("A's cancellation was never observed")
			}
			return bAt.Sub(aAt), unanswered, nil
		}
		if time.Now().After(deadline) {
			return 0, unanswered, fmt.Errorf("B never acquired within %v", expiry+hung)
		}
		time.Sleep(poll)
	}
}

// Holder A's connection to the lock node is blackholed (calls hang, nothing is
// closed; the client has its default timeouts and ContextTimeoutEnabled off).
// After the lock expires on the node, holder B acquires it. In every run, A's
// job context was cancelled before B acquired. 20 runs per expiry, all at once
// on distinct lock names and proxies; half are partitioned right after the
// acquisition, half after one extension.
func TestPartitionedHolderIsCancelledBeforeTheNextHolderAcquires(t *testing.T) {
	srv := testenv.RedisServer(t)
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = direct.Close() })
	const runs = 20
	expiries := []time.Duration{600 * time.Millisecond, 1500 * time.Millisecond, 8 * time.Second}
	// A run is void when A loses the lock before its link is cut (on a machine
	// too busy for its calls to answer within their bounds); it is done again,
	// up to voidTries times, and only the runs that were not void count.
	const voidTries = 10
	lag := startTimerLag(t)
	gaps := make([][]time.Duration, len(expiries))
	errs := make([][]error, len(expiries))
	voids := make([]atomic.Int32, len(expiries))
	unanswered := make([]atomic.Int32, len(expiries))
	var wg sync.WaitGroup
	for i, expiry := range expiries {
		gaps[i], errs[i] = make([]time.Duration, runs), make([]error, runs)
		lb := newLocker(t, []redis.UniversalClient{direct}, lock.WithExpiry(expiry), lock.WithTries(1))
		for r := 0; r < runs; r++ {
			px := testenv.NewFaultProxy(t, srv.Addr)
			ca := redis.NewClient(&redis.Options{Addr: px.Addr(), MaxRetries: -1})
			t.Cleanup(func() { _ = ca.Close() })
			if err := ca.Ping(context.Background()).Err(); err != nil { // dial before 60 runs start at once
				t.Fatal(err)
			}
			var extended atomic.Int32
			la := newLocker(t, []redis.UniversalClient{ca}, lock.WithExpiry(expiry), lock.WithTries(1),
				lock.WithOnExtend(func(string) { extended.Add(1) }))
			name := fmt.Sprintf("%s:%v:%d", testenv.Prefix(t), expiry, r)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for try := 0; try < voidTries; try++ {
					var n int
					gaps[i][r], n, errs[i][r] = partitionRun(la, lb, &extended, px, lag, fmt.Sprintf("%s:%d", name, try), expiry, int32(r%2))
					unanswered[i].Add(int32(n))
					if !errors.Is(errs[i][r], errVoid) {
						return
					}
					voids[i].Add(1)
					t.Logf("expiry %v, run %d, void: %v", expiry, r, errs[i][r])
					extended.Store(0)
				}
			}()
		}
	}
	wg.Wait()
	for i, expiry := range expiries {
		failed := 0
		for r, err := range errs[i] {
			if err != nil {
				failed++
				t.Errorf("expiry %v, run %d (after %d void runs of all): %v", expiry, r, voids[i].Load(), err)
			}
		}
		g := slices.Clone(gaps[i])
		slices.Sort(g)
		t.Logf("expiry %v: in %d of %d runs A was cancelled before B acquired (%d void runs done again, %d of B's calls unanswered in time); "+
			"A's lead as read: min %v, median %v, max %v", expiry, runs-failed, runs, voids[i].Load(), unanswered[i].Load(),
			g[0].Round(time.Millisecond), g[runs/2].Round(time.Millisecond), g[runs-1].Round(time.Millisecond))
	}
	t.Logf("this process's timers fired up to %v late", time.Duration(lag.worst.Load()).Round(time.Millisecond))
}

// The lock key vanishes from the node (a restart without persistence, a failover
// to a replica that never saw it) and B acquires the lock. A's next extension is
// answered "not yours": A's context is cancelled at that extension, long before
// the validity A's last successful call gave it, and A's unlock leaves B's lock
// alone.
func TestTakenLockIsGivenUpAtTheRefusedExtension(t *testing.T) {
	_, clients := nodes(t, 1)
	const expiry = 3 * time.Second // extensions every 1s; validity ~2.97s
	var extended atomic.Int32
	la := newLocker(t, clients, lock.WithExpiry(expiry), lock.WithTries(1), lock.WithOnExtend(func(string) { extended.Add(1) }))
	lb := newLocker(t, clients, lock.WithExpiry(expiry), lock.WithTries(1))
	ctx := context.Background()
	held, release, err := la.Acquire(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	acquired := time.Now()
	clock, stop := watchCancel(held)
	defer stop()
	if err := clients[0].Del(ctx, "report").Err(); err != nil {
		t.Fatal(err)
	}
	_, rb, ok, err := lb.TryAcquire(ctx, "report")
	if !ok || err != nil {
		t.Fatalf("B after the key vanished: %v %v", ok, err)
	}
	defer rb()
	aAt, seen := clock.when(10 * time.Second)
	if !seen {
		t.Fatal("A's context was never cancelled")
	}
	var lost *lock.LostError
	if !errors.As(context.Cause(held), &lost) {
		t.Fatalf("cause %v, want a *LostError", context.Cause(held))
	}
	// Cancelled at the refused extension, not at the end of its validity: the
	// cause says a quorum answered, and no extension succeeded before it. (Read
	// from the cause, not the clock: on a busy machine the first extension may
	// be late, or miss its bound and be tried again.)
	if !refused(lost) || extended.Load() != 0 {
		t.Fatalf("A cancelled %v after acquiring, with %d extensions, because %q; want at its first extension, answered taken",
			aAt.Sub(acquired), extended.Load(), lost.Reason)
	}
	release()
	if n := clients[0].Exists(ctx, "report").Val(); n != 1 {
		t.Fatal("A's unlock removed B's lock")
	}
	t.Logf("A cancelled %v after acquiring (its first extension is due at %v): %v", aAt.Sub(acquired).Round(time.Millisecond), expiry/3, lost)
}

// Three nodes: a minority answering "taken" or not answering at all leaves the
// holder running through several extensions; a quorum answering "taken"
// cancels it at once.
func TestThreeNodesQuorumTakenCancelsMinorityDoesNot(t *testing.T) {
	srvs, direct := nodes(t, 3)
	var proxies []*testenv.FaultProxy
	var clients []redis.UniversalClient
	for _, s := range srvs {
		px := testenv.NewFaultProxy(t, s.Addr)
		c := redis.NewClient(&redis.Options{Addr: px.Addr(), MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		proxies, clients = append(proxies, px), append(clients, c)
	}
	const expiry = 1500 * time.Millisecond
	var extended atomic.Int32
	l := newLocker(t, clients, lock.WithExpiry(expiry), lock.WithTries(1), lock.WithOnExtend(func(string) { extended.Add(1) }))
	ctx := context.Background()
	someoneElse := func(name string, nodes ...int) {
		for _, n := range nodes {
			if err := direct[n].Set(ctx, name, "someone-else", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// keepsRunning holds a lock through three extensions while fault is on one
	// node; a quorum still answers, so nothing may cancel the holder. A run is
	// void, and done again on a new name, when a starved machine made the
	// holder's calls miss their bounds: it was cancelled at its local deadline,
	// or a healthy node's copy expired meanwhile and answered "not yours".
	keepsRunning := func(what string, faulty int, fault func(name string), heal func()) {
		t.Helper()
		const tries = 10
		for try := 1; ; try++ {
			name := fmt.Sprintf("%s-%d", what, try)
			err := func() error {
				held, release, err := l.Acquire(ctx, name)
				if errors.Is(err, lock.ErrUnreachable) {
					return fmt.Errorf("%w: the acquisition got no answer in time: %v", errVoid, err)
				}
				if err != nil {
					t.Fatal(err)
				}
				defer release()
				fault(name)
				defer heal()
				from := extended.Load()
				testenv.Eventually(t, time.Minute, "three more extensions", func() bool { return extended.Load() >= from+3 || held.Err() != nil })
				if held.Err() == nil {
					return nil
				}
				var lost *lock.LostError
				if !errors.As(context.Cause(held), &lost) {
					t.Fatalf("%s: cause %v, want a *LostError", name, context.Cause(held))
				}
				if !refused(lost) {
					return fmt.Errorf("%w: %v", errVoid, lost)
				}
				for n := range direct {
					if n != faulty && direct[n].Exists(ctx, name).Val() == 0 {
						return fmt.Errorf("%w: the lock expired on healthy node %d: %v", errVoid, n, lost)
					}
				}
				return fmt.Errorf("%s: cancelled although a quorum still answered: %v", name, lost)
			}()
			if !errors.Is(err, errVoid) {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if try == tries {
				t.Fatalf("%s: %d void runs in a row; the last: %v", what, tries, err)
			}
			t.Logf("%s: %v", name, err)
		}
	}
	keepsRunning("minority-taken", 0, func(name string) { someoneElse(name, 0) }, func() {})
	keepsRunning("minority-silent", 1, func(string) { proxies[1].Blackhole() }, proxies[1].Pass)

	var held context.Context
	var release func()
	var err error
	for try := 1; ; try++ { // on a starved machine an acquisition can miss its bound
		held, release, err = l.Acquire(ctx, "quorum-taken")
		if err == nil || !errors.Is(err, lock.ErrUnreachable) || try == 10 {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	acquired := time.Now()
	clock, stop := watchCancel(held)
	defer stop()
	someoneElse("quorum-taken", 0, 2)
	from := extended.Load() // extensions that succeed after the takeover
	aAt, seen := clock.when(time.Minute)
	if !seen {
		t.Fatal("never cancelled after a quorum answered taken")
	}
	var lost *lock.LostError
	if !errors.As(context.Cause(held), &lost) {
		t.Fatalf("cause %v, want a *LostError", context.Cause(held))
	}
	if !refused(lost) || extended.Load() != from {
		t.Fatalf("cancelled %v after acquiring, %d extensions after the takeover, because %q; want at the first extension, answered taken",
			aAt.Sub(acquired), extended.Load()-from, lost.Reason)
	}
}

// refused reports whether a holder was cancelled because a quorum of nodes
// answered that the lock is not its own (rather than at its local deadline).
func refused(lost *lock.LostError) bool {
	return strings.HasPrefix(lost.Reason, "a quorum of its nodes answered")
}

// A job that panics: Do releases the lock on the way out and the panic goes on
// to the caller; a new Do acquires at once and no goroutine is left behind.
func TestPanickingJobReleasesTheLock(t *testing.T) {
	_, clients := nodes(t, 1)
	// The expiry plays no part; it is long enough for the acquisition's bound
	// (expiry/20) to hold on a busy machine.
	l := newLocker(t, clients, lock.WithExpiry(3*time.Second), lock.WithTries(1))
	ctx := context.Background()
	before := goleak.IgnoreCurrent()
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		_ = l.Do(ctx, "panicky", func(context.Context) error { panic("bug in the job") })
	}()
	if recovered != "bug in the job" {
		t.Fatalf("recovered %v, want the job's panic", recovered)
	}
	if n := clients[0].Exists(ctx, "panicky").Val(); n != 0 {
		t.Fatal("the lock is still held after the job panicked")
	}
	ran := 0
	if err := l.Do(ctx, "panicky", func(context.Context) error { ran++; return nil }); err != nil || ran != 1 {
		t.Fatalf("a new Do after the panic: %v, ran %d times", err, ran)
	}
	goleak.VerifyNone(t, before)
}

// An acquisition whose reply comes after the library stopped waiting (the SET
// reached the node, its answer did not come back in time) is reported
// unreachable and leaves no lock behind: it is removed as soon as the late reply
// arrives, long before it would expire.
func TestAbandonedAcquisitionLeavesNoLock(t *testing.T) {
	srv := testenv.RedisServer(t)
	direct := srv.Client(t)
	px := testenv.NewFaultProxy(t, srv.Addr)
	ca := redis.NewClient(&redis.Options{Addr: px.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = ca.Close() })
	const expiry = 8 * time.Second // each call waits at most expiry/4 = 2s
	l := newLocker(t, []redis.UniversalClient{ca}, lock.WithExpiry(expiry), lock.WithTries(1))
	ctx := context.Background()
	if err := ca.Ping(ctx).Err(); err != nil { // an open connection, so the delay hits the SET alone
		t.Fatal(err)
	}
	// Each way: the SET lands at +1.05s, its reply comes at +2.1s; the unlock
	// (EVALSHA, NOSCRIPT, EVAL) lands by about +5.3s.
	px.SetDelay(1050 * time.Millisecond)
	began := time.Now()
	_, release, err := l.Acquire(ctx, "slow")
	if err == nil {
		release()
		t.Fatal("acquired although the reply came after the bound")
	}
	if !errors.Is(err, lock.ErrUnreachable) {
		t.Fatalf("Acquire: %v, want ErrUnreachable", err)
	}
	if v := direct.Get(ctx, "slow").Val(); v == "" {
		t.Fatal("the late SET never reached the node: the test proves nothing")
	}
	// Unremoved, the key would live until at least began+9s.
	testenv.Eventually(t, time.Until(began.Add(expiry-time.Second/2)), "the abandoned lock removed", func() bool {
		return direct.Exists(ctx, "slow").Val() == 0
	})
	px.SetDelay(0)
	if err := l.Do(ctx, "slow", func(context.Context) error { return nil }); err != nil {
		t.Fatalf("after the abandoned acquisition: %v", err)
	}
}

// A client with no socket timeouts at all (ReadTimeout -1) over a blackholed
// link: every call the library makes is still bounded. Acquisition fails as
// unreachable, a held lock's context is cancelled at its validity, and release
// returns after the unlock timeout.
func TestCallsAreBoundedWhenTheClientWaitsForever(t *testing.T) {
	srv := testenv.RedisServer(t)
	px := testenv.NewFaultProxy(t, srv.Addr)
	ca := redis.NewClient(&redis.Options{Addr: px.Addr(), MaxRetries: -1, ReadTimeout: -1, WriteTimeout: -1})
	t.Cleanup(func() { _ = ca.Close() })
	l := newLocker(t, []redis.UniversalClient{ca}, lock.WithExpiry(time.Second), lock.WithTries(1),
		lock.WithUnlockTimeout(300*time.Millisecond))
	ctx := context.Background()
	within := func(what string, d time.Duration, f func()) {
		t.Helper()
		done := make(chan struct{})
		go func() { defer close(done); f() }()
		select {
		case <-done:
		case <-time.After(d):
			px.Close() // let the stuck call return so the test can end
			<-done
			t.Fatalf("%s did not return within %v", what, d)
		}
	}
	px.Blackhole()
	var err error
	within("Acquire on a blackholed node", 10*time.Second, func() { _, _, err = l.Acquire(ctx, "hang") })
	if !errors.Is(err, lock.ErrUnreachable) {
		t.Fatalf("Acquire: %v, want ErrUnreachable", err)
	}
	px.Pass()
	held, release, err := l.Acquire(ctx, "hang2")
	if err != nil {
		t.Fatal(err)
	}
	px.Blackhole()
	within("cancelling the held context", 10*time.Second, func() { <-held.Done() })
	within("release", 10*time.Second, release)
	px.Pass()
}

// With consumer.WithLock: A's path to the lock node is blackholed while its
// record store stays healthy (its record lease is renewed throughout). B takes
// the lock once it expires and runs the handler. A's handler context was
// cancelled before B's handler started; each handler ran exactly once. A run in
// which A's watchdog was starved (cancelled after B started, by no more than
// this process's timers were measured to lag) is void and done again.
func TestWithLockPartitionedHolderStopsBeforeTheTakeover(t *testing.T) {
	lag := startTimerLag(t)
	const tries = 10
	for try := 1; ; try++ {
		err := withLockTakeover(t, lag, consumer.Key(fmt.Sprintf("report-2026-10-%d", try)))
		if !errors.Is(err, errVoid) {
			if err != nil {
				t.Fatal(err)
			}
			return
		}
		if try == tries {
			t.Fatalf("%d void runs in a row; the last: %v", tries, err)
		}
		t.Logf("run %d: %v", try, err)
	}
}

// withLockTakeover is one run of TestWithLockPartitionedHolderStopsBeforeTheTakeover on key.
func withLockTakeover(t *testing.T, lag *timerLag, key consumer.Key) error {
	srv := testenv.RedisServer(t)
	direct := srv.Client(t)
	px := testenv.NewFaultProxy(t, srv.Addr)
	ca := redis.NewClient(&redis.Options{Addr: px.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = ca.Close() })
	const expiry = 900 * time.Millisecond
	la := newLocker(t, []redis.UniversalClient{ca}, lock.WithExpiry(expiry), lock.WithTries(1))
	lb := newLocker(t, []redis.UniversalClient{direct}, lock.WithExpiry(expiry), lock.WithTries(1))
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	storeA, err := redisstore.NewStore(rdb, consumer.WithPrefix(prefix), consumer.WithScope("reports"), consumer.WithLock(la))
	if err != nil {
		t.Fatal(err)
	}
	storeB, err := redisstore.NewStore(rdb, consumer.WithPrefix(prefix), consumer.WithScope("reports"), consumer.WithLock(lb))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var aRuns, bRuns atomic.Int32
	aCtx := make(chan context.Context, 1)
	var aCancelled atomic.Int64
	aRes := make(chan consumer.Result[string], 1)
	go func() {
		aRes <- consumer.ExecuteIdempotently(ctx, storeA, key, nil, func(hctx context.Context) (string, error) {
			aRuns.Add(1)
			aCtx <- hctx
			<-hctx.Done()
			aCancelled.Store(time.Now().UnixNano())
			return "", context.Cause(hctx)
		})
	}()
	ha := <-aCtx
	clock, stop := watchCancel(ha)
	defer stop()
	px.Blackhole()
	defer px.Pass()
	lockName := storeA.Settings().LockName(key)
	testenv.Eventually(t, time.Minute, "A's lock to expire on the node", func() bool {
		return direct.Exists(ctx, lockName).Val() == 0
	})
	var bStart time.Time
	var aLiveAtB bool
	rb := consumer.ExecuteIdempotently(ctx, storeB, key, nil, func(hctx context.Context) (string, error) {
		bStart = time.Now()
		aLiveAtB = ha.Err() == nil // the context itself: A's goroutine may not have run yet
		bRuns.Add(1)
		return "B", nil
	})
	if rb.Outcome != consumer.Success {
		t.Fatalf("B: %v %v", rb.Outcome, rb.Err)
	}
	if aLiveAtB {
		aAt, ok := clock.when(time.Minute)
		if !ok {
			return errors.New("B's handler started while A's handler context was live, and it was never cancelled")
		}
		late, worst := aAt.Sub(bStart), lag.worstSince(aAt, time.Minute)
		px.Pass()
		<-aRes
		if late <= 2*worst {
			return fmt.Errorf("%w: A's handler context was cancelled %v after B's handler started, within what this process's timers lagged (up to %v)",
				errVoid, late, worst)
		}
		return fmt.Errorf("B's handler started while A's handler context was live: it was cancelled %v later, "+
			"more than twice this process's worst timer lag (%v)", late, worst)
	}
	px.Pass()
	ra := <-aRes
	if ra.Outcome != consumer.Error {
		t.Fatalf("A: %v %v, want ERROR", ra.Outcome, ra.Err)
	}
	again := consumer.ExecuteIdempotently(ctx, storeB, key, nil, func(context.Context) (string, error) {
		bRuns.Add(1)
		return "again", nil
	})
	if again.Outcome != consumer.Duplicate || again.Value != "B" {
		t.Fatalf("after: %v %q", again.Outcome, again.Value)
	}
	if aRuns.Load() != 1 || bRuns.Load() != 1 {
		t.Fatalf("handler runs: A %d, B %d; want 1 and 1", aRuns.Load(), bRuns.Load())
	}
	t.Logf("A's handler context was cancelled %v before B's handler started, as read (B: fence %d; A: %v)",
		bStart.Sub(time.Unix(0, aCancelled.Load())).Round(time.Millisecond), rb.Fence, ra.Err)
	return nil
}
