// Package consumertest is the conformance suite that every consumer.Store must pass:
// the state machine of DESIGN section 3 observed through ExecuteIdempotently,
// ExecuteBatch and the Store methods, with exact counts. Run it from a test with a
// factory that returns a fresh, empty store (its own key prefix on a shared server):
//
//	func TestConformance(t *testing.T) {
//		consumertest.Run(t, func(t *testing.T, opts ...consumer.Option) (consumer.Store, error) {
//			return consumer.NewMemoryStore(opts...)
//		})
//	}
package consumertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/idemkit/idemkit/consumer"
)

// Factory returns a new, empty store configured with opts; every call returns a
// store that shares no records with the stores of earlier calls.
type Factory func(t *testing.T, opts ...consumer.Option) (consumer.Store, error)

// Run runs the whole suite as subtests of t.
func Run(t *testing.T, newStore Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, Factory)
	}{
		{"SuccessThenDuplicate", testSuccessThenDuplicate},
		{"HandlerSeesKeyAttemptFence", testHandlerInfo},
		{"ConcurrentExactlyOnce", testConcurrentExactlyOnce},
		{"RetryAfterRetryableError", testRetry},
		{"ExhaustedAfterMaxAttempts", testExhausted},
		{"PermanentError", testPermanent},
		{"PayloadConflict", testConflict},
		{"FingerprintOff", testFingerprintOff},
		{"StalledOwnerLosesToTakeover", testTakeover},
		{"TakeoverOnLastAttemptExhausts", testTakeoverExhausts},
		{"ExpiredLeaseNoTakeoverStillCompletes", testExpiredLeaseCompletes},
		{"HeartbeatKeepsLongHandler", testHeartbeat},
		{"RenewalFailureCancelsHandler", testRenewalFailure},
		{"SilentTakeoverGivesLeaseLost", testSilentTakeover},
		{"ReleaseDoesNotCountAttempt", testRelease},
		{"AbandonReleasesWithoutCounting", testAbandon},
		{"ResultTooLarge", testResultTooLarge},
		{"UndecodableStoredResult", testUndecodable},
		{"WaitInProgress", testWaitInProgress},
		{"PanicIsRetryable", testPanic},
		{"BadInput", testBadInput},
		{"InvalidOptions", testInvalidOptions},
		{"BatchInOrderExactlyOnce", testBatch},
		{"BatchConcurrentPerMessage", testBatchConcurrent},
		{"BatchCancelledReleasesUnstarted", testBatchCancelled},
		{"BatchStopAfterFailure", testBatchStopAfterFailure},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newStore) })
	}
}

var ns = uuid.MustParse("6f0c3c2e-7d7e-4a57-9a36-4f7d2b1f0c11")

func must(t *testing.T, f Factory, opts ...consumer.Option) consumer.Store {
	t.Helper()
	s, err := f(t, opts...)
	if err != nil {
		t.Fatalf("new store: %v", err)
	}
	return s
}

func key(parts ...string) consumer.Key { return consumer.NewKey(ns, parts...) }

func nonce() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

type value struct {
	Key   string `json:"key"`
	Nonce string `json:"nonce"`
}

func expect[T any](t *testing.T, r consumer.Result[T], want consumer.Outcome, target error) {
	t.Helper()
	if r.Outcome != want {
		t.Fatalf("outcome = %v (err %v), want %v", r.Outcome, r.Err, want)
	}
	switch {
	case target == nil && r.Err != nil:
		t.Fatalf("err = %v, want none", r.Err)
	case target != nil && !errors.Is(r.Err, target):
		t.Fatalf("err = %v, want one matching %v", r.Err, target)
	}
}

func testSuccessThenDuplicate(t *testing.T, f Factory) {
	s := must(t, f)
	ctx := context.Background()
	k := key("order", "1")
	var runs atomic.Int32
	fn := func(ctx context.Context) (value, error) {
		runs.Add(1)
		return value{Key: string(k), Nonce: nonce()}, nil
	}
	first := consumer.ExecuteIdempotently(ctx, s, k, []byte("p"), fn)
	expect(t, first, consumer.Success, nil)
	if first.Attempt != 1 || first.Fence != 1 {
		t.Fatalf("first attempt/fence = %d/%d, want 1/1", first.Attempt, first.Fence)
	}
	for i := 0; i < 3; i++ {
		dup := consumer.ExecuteIdempotently(ctx, s, k, []byte("p"), fn)
		expect(t, dup, consumer.Duplicate, nil)
		if dup.Value != first.Value {
			t.Fatalf("duplicate value = %+v, want %+v", dup.Value, first.Value)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	rec, err := s.Peek(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(first.Value)
	if !rec.Found || rec.State != "completed" || string(rec.Result) != string(want) {
		t.Fatalf("record = %+v, want completed with %s", rec, want)
	}
	if set := s.Settings(); rec.TTL < set.Retention-set.Lease || rec.TTL > set.Retention+set.Lease {
		t.Fatalf("record TTL = %v, want the retention %v (give or take the lease %v)", rec.TTL, set.Retention, set.Lease)
	}
	missing, err := s.Peek(ctx, key("never"))
	if err != nil || missing.Found {
		t.Fatalf("peek of an unused key = %+v, %v; want not found", missing, err)
	}
}

func testHandlerInfo(t *testing.T, f Factory) {
	s := must(t, f, consumer.WithScope("billing"))
	k := key("info")
	var got consumer.Info
	r := consumer.ExecuteIdempotently(context.Background(), s, k, nil, func(ctx context.Context) (int, error) {
		got, _ = consumer.InfoFromContext(ctx)
		if fence, ok := consumer.FenceFromContext(ctx); !ok || fence != got.Fence {
			return 0, fmt.Errorf("FenceFromContext = %d, %v", fence, ok)
		}
		return 1, nil
	})
	expect(t, r, consumer.Success, nil)
	if got.Key != k || got.Scope != "billing" || got.Attempt != 1 || got.Fence != 1 || got.Unguarded {
		t.Fatalf("handler info = %+v", got)
	}
}

// testConcurrentExactlyOnce: 64 goroutines race over 1,000 keys, each delivered 5 times.
func testConcurrentExactlyOnce(t *testing.T, f Factory) {
	const keys, deliveries, workers = 1000, 5, 64
	s := must(t, f)
	ctx := context.Background()
	runs := make([]atomic.Int32, keys)
	type delivery struct{ i int }
	work := make(chan delivery)
	go func() {
		for d := 0; d < deliveries; d++ {
			for i := 0; i < keys; i++ {
				work <- delivery{i}
			}
		}
		close(work)
	}()
	var mu sync.Mutex
	success := make(map[int]value, keys)
	var dups []struct {
		i int
		v value
	}
	var inProgress, errs atomic.Int32
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range work {
				k := key("race", fmt.Sprint(d.i))
				r := consumer.ExecuteIdempotently(ctx, s, k, []byte(k), func(ctx context.Context) (value, error) {
					runs[d.i].Add(1)
					return value{Key: string(k), Nonce: nonce()}, nil
				})
				switch r.Outcome {
				case consumer.Success:
					mu.Lock()
					success[d.i] = r.Value
					mu.Unlock()
				case consumer.Duplicate:
					mu.Lock()
					dups = append(dups, struct {
						i int
						v value
					}{d.i, r.Value})
					mu.Unlock()
				case consumer.InProgress:
					inProgress.Add(1)
				default:
					errs.Add(1)
					t.Errorf("key %d: %v %v", d.i, r.Outcome, r.Err)
				}
			}
		}()
	}
	wg.Wait()
	for i := range runs {
		if n := runs[i].Load(); n != 1 {
			t.Errorf("key %d: handler ran %d times, want exactly 1", i, n)
		}
	}
	if len(success) != keys {
		t.Fatalf("%d keys succeeded, want %d", len(success), keys)
	}
	if got := len(dups) + int(inProgress.Load()); got != keys*(deliveries-1) || errs.Load() != 0 {
		t.Fatalf("duplicates %d + in progress %d = %d, errors %d; want %d and 0",
			len(dups), inProgress.Load(), got, errs.Load(), keys*(deliveries-1))
	}
	for _, d := range dups {
		want, _ := json.Marshal(success[d.i])
		got, _ := json.Marshal(d.v)
		if string(got) != string(want) {
			t.Fatalf("key %d: cached result %s differs from the stored %s", d.i, got, want)
		}
	}
	t.Logf("%d executions, %d duplicates, %d in progress", keys, len(dups), inProgress.Load())
}

func testRetry(t *testing.T, f Factory) {
	s := must(t, f)
	ctx := context.Background()
	k := key("retry")
	boom := errors.New("downstream timeout")
	var runs atomic.Int32
	fn := func(ctx context.Context) (string, error) {
		info, _ := consumer.InfoFromContext(ctx)
		if runs.Add(1) == 1 {
			return "", boom
		}
		return fmt.Sprintf("ok on attempt %d", info.Attempt), nil
	}
	r1 := consumer.ExecuteIdempotently(ctx, s, k, nil, fn)
	expect(t, r1, consumer.Error, boom)
	if !r1.Retryable() || r1.Action() != consumer.Retry {
		t.Fatalf("a handler error must be retryable: %v %v", r1.Retryable(), r1.Action())
	}
	rec, _ := s.Peek(ctx, k)
	if rec.State != "retry" || rec.Error != boom.Error() || rec.Attempts != 1 {
		t.Fatalf("record after a retryable failure = %+v", rec)
	}
	r2 := consumer.ExecuteIdempotently(ctx, s, k, nil, fn)
	expect(t, r2, consumer.Success, nil)
	if r2.Value != "ok on attempt 2" || r2.Attempt != 2 || r2.Fence != 2 {
		t.Fatalf("retry = %q attempt %d fence %d", r2.Value, r2.Attempt, r2.Fence)
	}
	expect(t, consumer.ExecuteIdempotently(ctx, s, k, nil, fn), consumer.Duplicate, nil)
	if n := runs.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2", n)
	}
}

func testExhausted(t *testing.T, f Factory) {
	s := must(t, f, consumer.WithMaxAttempts(3))
	ctx := context.Background()
	k := key("poison")
	boom := errors.New("cannot parse invoice")
	var runs atomic.Int32
	fn := func(ctx context.Context) (int, error) { runs.Add(1); return 0, boom }
	for i := 1; i <= 2; i++ {
		r := consumer.ExecuteIdempotently(ctx, s, k, nil, fn)
		expect(t, r, consumer.Error, boom)
		if errors.Is(r.Err, consumer.ErrAttemptsExhausted) || r.Attempt != i {
			t.Fatalf("attempt %d: %v (attempt %d)", i, r.Err, r.Attempt)
		}
	}
	last := consumer.ExecuteIdempotently(ctx, s, k, nil, fn)
	expect(t, last, consumer.Error, consumer.ErrAttemptsExhausted)
	if !errors.Is(last.Err, boom) || last.Action() != consumer.DeadLetter {
		t.Fatalf("last attempt: err %v, action %v; want the handler error and dead-letter", last.Err, last.Action())
	}
	for i := 0; i < 2; i++ {
		dup := consumer.ExecuteIdempotently(ctx, s, k, nil, fn)
		expect(t, dup, consumer.Duplicate, consumer.ErrAttemptsExhausted)
		if !strings.Contains(dup.Err.Error(), boom.Error()) || dup.Action() != consumer.DeadLetter {
			t.Fatalf("stored error %q lacks the handler's text, or action %v is not dead-letter", dup.Err, dup.Action())
		}
	}
	if n := runs.Load(); n != 3 {
		t.Fatalf("handler ran %d times, want exactly 3 (max attempts)", n)
	}
	rec, _ := s.Peek(ctx, k)
	if rec.State != "failed" || rec.Permanent || rec.Attempts != 3 {
		t.Fatalf("record = %+v, want failed (exhausted) after 3 attempts", rec)
	}
}

func testPermanent(t *testing.T, f Factory) {
	s := must(t, f)
	ctx := context.Background()
	k := key("permanent")
	bad := errors.New("card declined")
	var runs atomic.Int32
	fn := func(ctx context.Context) (int, error) { runs.Add(1); return 0, consumer.Permanent(bad) }
	r := consumer.ExecuteIdempotently(ctx, s, k, nil, fn)
	expect(t, r, consumer.Error, consumer.ErrPermanent)
	if !errors.Is(r.Err, bad) || r.Retryable() || r.Action() != consumer.DeadLetter {
		t.Fatalf("permanent: %v retryable=%v action=%v", r.Err, r.Retryable(), r.Action())
	}
	dup := consumer.ExecuteIdempotently(ctx, s, k, nil, fn)
	expect(t, dup, consumer.Duplicate, consumer.ErrPermanent)
	if !strings.Contains(dup.Err.Error(), "card declined") || dup.Action() != consumer.DeadLetter {
		t.Fatalf("duplicate of a permanent failure: %v, action %v", dup.Err, dup.Action())
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

func testConflict(t *testing.T, f Factory) {
	s := must(t, f)
	ctx := context.Background()
	k := key("conflict")
	var runs atomic.Int32
	fn := func(ctx context.Context) (int, error) { runs.Add(1); return 7, nil }
	expect(t, consumer.ExecuteIdempotently(ctx, s, k, []byte(`{"amount":10}`), fn), consumer.Success, nil)
	r := consumer.ExecuteIdempotently(ctx, s, k, []byte(`{"amount":99}`), fn)
	expect(t, r, consumer.Error, consumer.ErrPayloadConflict)
	if r.Action() != consumer.DeadLetter {
		t.Fatalf("conflict action = %v, want dead-letter", r.Action())
	}
	expect(t, consumer.ExecuteIdempotently(ctx, s, k, []byte(`{"amount":10}`), fn), consumer.Duplicate, nil)
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	// A conflict is found in every state, also while the first run holds the key.
	k2 := key("conflict-running")
	st := must(t, f)
	reps := st.Begin(ctx, []consumer.Claim{{Key: k2, Owner: "a", Fingerprint: "fp-a"}})
	if !reps[0].Claimed() {
		t.Fatalf("claim = %+v", reps[0])
	}
	reps = st.Begin(ctx, []consumer.Claim{{Key: k2, Owner: "b", Fingerprint: "fp-b"}})
	if reps[0].Status != consumer.StatusConflict {
		t.Fatalf("claim with another fingerprint while started = %v, want CONFLICT", reps[0].Status)
	}
}

func testFingerprintOff(t *testing.T, f Factory) {
	s := must(t, f, consumer.WithFingerprint(false))
	ctx := context.Background()
	k := key("nofp")
	fn := func(ctx context.Context) (int, error) { return 7, nil }
	expect(t, consumer.ExecuteIdempotently(ctx, s, k, []byte("a"), fn), consumer.Success, nil)
	r := consumer.ExecuteIdempotently(ctx, s, k, []byte("b"), fn)
	expect(t, r, consumer.Duplicate, nil)
	if r.Value != 7 {
		t.Fatalf("value = %d", r.Value)
	}
}

// testTakeover drives the store directly: owner A claims and stalls (no renewal);
// after the lease B takes over with a larger fence; A's late completion is refused
// and changes nothing.
func testTakeover(t *testing.T, f Factory) {
	lease := 200 * time.Millisecond
	s := must(t, f, consumer.WithLease(lease))
	ctx := context.Background()
	k := key("takeover")
	a := s.Begin(ctx, []consumer.Claim{{Key: k, Owner: "owner-a"}})[0]
	if a.Status != consumer.StatusAcquired || a.Fence != 1 || a.Attempts != 1 {
		t.Fatalf("A's claim = %+v", a)
	}
	b := s.Begin(ctx, []consumer.Claim{{Key: k, Owner: "owner-b"}})[0]
	if b.Status != consumer.StatusInProgress || b.Lease <= 0 || b.Lease > lease {
		t.Fatalf("B's claim during A's lease = %+v, want IN_PROGRESS with lease left", b)
	}
	time.Sleep(lease + 50*time.Millisecond)
	b = s.Begin(ctx, []consumer.Claim{{Key: k, Owner: "owner-b"}})[0]
	if b.Status != consumer.StatusTakenOver || b.Fence <= a.Fence || b.Attempts != 2 {
		t.Fatalf("B's claim after A's lease = %+v, want TAKEN_OVER with fence > %d", b, a.Fence)
	}
	late := s.Settle(ctx, []consumer.Settlement{{Key: k, Owner: "owner-a", Complete: true, Result: []byte(`"a"`)}})[0]
	if !errors.Is(late.Err, consumer.ErrLeaseLost) {
		t.Fatalf("A's late completion: %v, want lease lost", late.Err)
	}
	for _, e := range []error{
		s.Extend(ctx, []consumer.Owned{{Key: k, Owner: "owner-a"}})[0],
		s.Release(ctx, []consumer.Owned{{Key: k, Owner: "owner-a"}})[0],
		s.Settle(ctx, []consumer.Settlement{{Key: k, Owner: "owner-a", Message: "x"}})[0].Err,
	} {
		if !errors.Is(e, consumer.ErrLeaseLost) {
			t.Fatalf("A's late extend/release/fail: %v, want lease lost", e)
		}
	}
	rec, _ := s.Peek(ctx, k)
	if rec.State != "started" || rec.Owner != "owner-b" || rec.Fence != b.Fence {
		t.Fatalf("record after A's late calls = %+v, want B's claim unchanged", rec)
	}
	if err := s.Settle(ctx, []consumer.Settlement{{Key: k, Owner: "owner-b", Complete: true, Result: []byte(`"b"`)}})[0].Err; err != nil {
		t.Fatalf("B's completion: %v", err)
	}
	dup := consumer.ExecuteIdempotently(ctx, s, k, nil, func(ctx context.Context) (string, error) {
		t.Fatal("handler ran on a completed key")
		return "", nil
	})
	expect(t, dup, consumer.Duplicate, nil)
	if dup.Value != "b" || dup.Fence != b.Fence {
		t.Fatalf("duplicate = %q fence %d, want B's result and fence %d", dup.Value, dup.Fence, b.Fence)
	}
}

func testTakeoverExhausts(t *testing.T, f Factory) {
	lease := 100 * time.Millisecond
	s := must(t, f, consumer.WithLease(lease), consumer.WithMaxAttempts(2))
	ctx := context.Background()
	k := key("crashloop")
	for i, want := range []consumer.ClaimStatus{consumer.StatusAcquired, consumer.StatusTakenOver, consumer.StatusExhausted} {
		rep := s.Begin(ctx, []consumer.Claim{{Key: k, Owner: fmt.Sprint("crasher-", i)}})[0]
		if rep.Err != nil || rep.Status != want {
			t.Fatalf("claim %d = %+v, want %v", i, rep, want)
		}
		time.Sleep(lease + 30*time.Millisecond) // the owner "crashes": no renewal, no completion
	}
	r := consumer.ExecuteIdempotently(ctx, s, k, nil, func(ctx context.Context) (int, error) {
		t.Fatal("handler ran on an exhausted key")
		return 0, nil
	})
	expect(t, r, consumer.Duplicate, consumer.ErrAttemptsExhausted)
}

func testExpiredLeaseCompletes(t *testing.T, f Factory) {
	lease := 100 * time.Millisecond
	s := must(t, f, consumer.WithLease(lease))
	ctx := context.Background()
	k := key("late-but-alone")
	a := s.Begin(ctx, []consumer.Claim{{Key: k, Owner: "slow"}})[0]
	if !a.Claimed() {
		t.Fatalf("claim = %+v", a)
	}
	time.Sleep(lease + 30*time.Millisecond)
	// Nobody took over: the claim is still the owner's, so its completion stands.
	if err := s.Settle(ctx, []consumer.Settlement{{Key: k, Owner: "slow", Complete: true, Result: []byte("1")}})[0].Err; err != nil {
		t.Fatalf("completion after lease expiry without takeover: %v", err)
	}
	rec, _ := s.Peek(ctx, k)
	if rec.State != "completed" {
		t.Fatalf("record = %+v", rec)
	}
}

func testHeartbeat(t *testing.T, f Factory) {
	lease := 150 * time.Millisecond
	s := must(t, f, consumer.WithLease(lease))
	ctx := context.Background()
	k := key("long")
	var runs atomic.Int32
	started := make(chan struct{})
	release := make(chan struct{})
	done := make(chan consumer.Result[int])
	go func() {
		done <- consumer.ExecuteIdempotently(ctx, s, k, nil, func(ctx context.Context) (int, error) {
			runs.Add(1)
			close(started)
			<-release
			return 42, ctx.Err()
		})
	}()
	<-started
	for i := 0; i < 4; i++ { // four leases pass while the handler runs
		time.Sleep(lease)
		r := consumer.ExecuteIdempotently(ctx, s, k, nil, func(ctx context.Context) (int, error) {
			runs.Add(1)
			return 0, nil
		})
		expect(t, r, consumer.InProgress, nil)
		if r.LeaseLeft <= 0 || r.Action() != consumer.Wait {
			t.Fatalf("in progress: lease left %v, action %v", r.LeaseLeft, r.Action())
		}
	}
	close(release)
	r := <-done
	expect(t, r, consumer.Success, nil)
	if r.Value != 42 || runs.Load() != 1 {
		t.Fatalf("value %d, runs %d; want 42 and 1", r.Value, runs.Load())
	}
}

// flaky wraps a real store and lets a test break lease renewal.
type flaky struct {
	consumer.Store
	extendErr  atomic.Bool // Extend answers "store unavailable"
	extendDrop atomic.Bool // Extend claims success without renewing (a paused heartbeat)
}

func (f *flaky) Extend(ctx context.Context, items []consumer.Owned) []error {
	out := make([]error, len(items))
	switch {
	case f.extendErr.Load():
		for i := range out {
			out[i] = &consumer.StoreError{Op: "extend", Err: errors.New("connection refused")}
		}
		return out
	case f.extendDrop.Load():
		return out
	}
	return f.Store.Extend(ctx, items)
}

func testRenewalFailure(t *testing.T, f Factory) {
	lease := 120 * time.Millisecond
	s := &flaky{Store: must(t, f, consumer.WithLease(lease))}
	s.extendErr.Store(true)
	ctx := context.Background()
	k := key("renewal-fails")
	var cause error
	r := consumer.ExecuteIdempotently(ctx, s, k, nil, func(ctx context.Context) (int, error) {
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
			return 0, ctx.Err()
		case <-time.After(20 * lease):
			return 1, nil
		}
	})
	expect(t, r, consumer.Error, consumer.ErrLeaseLost)
	var ll *consumer.LeaseLostError
	if !errors.As(cause, &ll) || ll.Key != k || !strings.Contains(ll.Error(), "lease") {
		t.Fatalf("handler context cause = %v, want a *LeaseLostError naming the lease", cause)
	}
	// The attempt was cut short: it stored nothing, gave its claim back and was
	// not counted, so the next delivery runs at once as attempt 1.
	rec, _ := s.Peek(ctx, k)
	if rec.State != "retry" || len(rec.Result) != 0 || rec.Attempts != 0 {
		t.Fatalf("record = %+v: a lost attempt must store nothing and not be counted", rec)
	}
	if !r.Retryable() {
		t.Fatal("lease lost must be retryable")
	}
	next := consumer.ExecuteIdempotently(ctx, s.Store, k, nil, func(ctx context.Context) (int, error) { return 2, nil })
	expect(t, next, consumer.Success, nil)
	if next.Attempt != 1 || next.Fence != 2 {
		t.Fatalf("next delivery: attempt %d fence %d, want 1 and 2", next.Attempt, next.Fence)
	}
}

func testSilentTakeover(t *testing.T, f Factory) {
	lease := 120 * time.Millisecond
	base := must(t, f, consumer.WithLease(lease))
	s := &flaky{Store: base}
	s.extendDrop.Store(true) // A's heartbeat is "paused": its lease runs out
	ctx := context.Background()
	k := key("silent-takeover")
	var runs atomic.Int32
	aStarted, aGo := make(chan struct{}), make(chan struct{})
	aDone := make(chan consumer.Result[string])
	go func() {
		aDone <- consumer.ExecuteIdempotently(ctx, s, k, nil, func(ctx context.Context) (string, error) {
			runs.Add(1)
			close(aStarted)
			<-aGo
			return "a", nil
		})
	}()
	<-aStarted
	time.Sleep(lease + 40*time.Millisecond)
	b := consumer.ExecuteIdempotently(ctx, base, k, nil, func(ctx context.Context) (string, error) {
		runs.Add(1)
		return "b", nil
	})
	expect(t, b, consumer.Success, nil)
	if b.Fence != 2 || b.Attempt != 2 {
		t.Fatalf("takeover fence/attempt = %d/%d, want 2/2", b.Fence, b.Attempt)
	}
	close(aGo)
	a := <-aDone
	expect(t, a, consumer.Error, consumer.ErrLeaseLost)
	if a.Fence != 1 {
		t.Fatalf("A's fence = %d, want 1", a.Fence)
	}
	dup := consumer.ExecuteIdempotently(ctx, base, k, nil, func(ctx context.Context) (string, error) { return "c", nil })
	expect(t, dup, consumer.Duplicate, nil)
	if dup.Value != "b" || runs.Load() != 2 {
		t.Fatalf("stored %q after %d runs; want B's result after 2 runs", dup.Value, runs.Load())
	}
}

func testRelease(t *testing.T, f Factory) {
	s := must(t, f)
	ctx := context.Background()
	k := key("release")
	a := s.Begin(ctx, []consumer.Claim{{Key: k, Owner: "a"}})[0]
	if err := s.Release(ctx, []consumer.Owned{{Key: k, Owner: "a"}})[0]; err != nil {
		t.Fatal(err)
	}
	b := s.Begin(ctx, []consumer.Claim{{Key: k, Owner: "b"}})[0]
	if b.Status != consumer.StatusAcquired || b.Attempts != a.Attempts || b.Fence != a.Fence+1 {
		t.Fatalf("claim after release = %+v, want ACQUIRED, attempts %d, fence %d", b, a.Attempts, a.Fence+1)
	}
}

func testAbandon(t *testing.T, f Factory) {
	for _, perMessage := range []bool{false, true} {
		s := must(t, f, consumer.WithMaxAttempts(1))
		ctx := context.Background()
		k := key("abandon", fmt.Sprint(perMessage))
		var runs atomic.Int32
		upstream := errors.New("upstream answered 502")
		for i := 0; i < 3; i++ { // one allowed attempt, yet every abandon leaves it unspent
			r := consumer.ExecuteBatch(ctx, s, []consumer.BatchItem{{Key: k}},
				func(ctx context.Context, _ int, _ consumer.BatchItem) (int, error) {
					runs.Add(1)
					return 0, consumer.Abandon(upstream)
				}, consumer.WithPerMessageCompletion(perMessage))[0]
			expect(t, r, consumer.Error, consumer.ErrAbandoned)
			if !errors.Is(r.Err, upstream) || r.Action() != consumer.Retry {
				t.Fatalf("abandoned: err %v action %v, want the handler's error and retry", r.Err, r.Action())
			}
		}
		r := consumer.ExecuteIdempotently(ctx, s, k, nil, func(ctx context.Context) (int, error) { runs.Add(1); return 7, nil })
		expect(t, r, consumer.Success, nil)
		if r.Attempt != 1 || r.Fence != 4 || runs.Load() != 4 {
			t.Fatalf("after three abandons: attempt %d fence %d runs %d, want 1, 4, 4", r.Attempt, r.Fence, runs.Load())
		}
	}
}

func testResultTooLarge(t *testing.T, f Factory) {
	s := must(t, f, consumer.WithMaxResultSize(16))
	ctx := context.Background()
	k := key("big")
	var runs atomic.Int32
	fn := func(ctx context.Context) (string, error) { runs.Add(1); return strings.Repeat("x", 100), nil }
	r := consumer.ExecuteIdempotently(ctx, s, k, nil, fn)
	expect(t, r, consumer.Success, nil)
	if !r.ResultDropped || len(r.Value) != 100 {
		t.Fatalf("success with a big result: dropped=%v len=%d", r.ResultDropped, len(r.Value))
	}
	dup := consumer.ExecuteIdempotently(ctx, s, k, nil, fn)
	expect(t, dup, consumer.Duplicate, consumer.ErrResultTooLarge)
	var tl *consumer.ResultTooLargeError
	if !dup.ResultDropped || !errors.As(dup.Err, &tl) || tl.Size != 102 || dup.Value != "" {
		t.Fatalf("duplicate: %+v", dup)
	}
	if dup.Action() != consumer.Settle || runs.Load() != 1 {
		t.Fatalf("action %v runs %d", dup.Action(), runs.Load())
	}
}

func testUndecodable(t *testing.T, f Factory) {
	s := must(t, f)
	ctx := context.Background()
	k := key("undecodable")
	expect(t, consumer.ExecuteIdempotently(ctx, s, k, nil, func(ctx context.Context) (string, error) {
		return "not a number", nil
	}), consumer.Success, nil)
	r := consumer.ExecuteIdempotently(ctx, s, k, nil, func(ctx context.Context) (int, error) {
		t.Fatal("handler ran on a completed key")
		return 0, nil
	})
	expect(t, r, consumer.Duplicate, consumer.ErrUndecodableResult)
	if r.Action() != consumer.Settle {
		t.Fatalf("an undecodable duplicate must still be settled, got %v", r.Action())
	}
}

func testWaitInProgress(t *testing.T, f Factory) {
	ctx := context.Background()
	t.Run("GetsTheOtherRunsResult", func(t *testing.T) {
		s := must(t, f, consumer.WithLease(time.Second), consumer.WithWaitInProgress(5*time.Second))
		k := key("wait", "result")
		started, finish := make(chan struct{}), make(chan struct{})
		done := make(chan consumer.Result[string])
		go func() {
			done <- consumer.ExecuteIdempotently(ctx, s, k, nil, func(ctx context.Context) (string, error) {
				close(started)
				<-finish
				return "first", nil
			})
		}()
		<-started
		time.AfterFunc(100*time.Millisecond, func() { close(finish) })
		r := consumer.ExecuteIdempotently(ctx, s, k, nil, func(ctx context.Context) (string, error) {
			t.Error("the waiting delivery ran its handler")
			return "second", nil
		})
		expect(t, r, consumer.Duplicate, nil)
		if r.Value != "first" {
			t.Fatalf("waited for %q, want the first run's result", r.Value)
		}
		expect(t, <-done, consumer.Success, nil)
	})
	t.Run("TakesOverADeadOwner", func(t *testing.T) {
		s := must(t, f, consumer.WithLease(150*time.Millisecond), consumer.WithWaitInProgress(5*time.Second))
		k := key("wait", "dead")
		if rep := s.Begin(ctx, []consumer.Claim{{Key: k, Owner: "dead"}})[0]; !rep.Claimed() {
			t.Fatalf("claim = %+v", rep)
		}
		r := consumer.ExecuteIdempotently(ctx, s, k, nil, func(ctx context.Context) (string, error) { return "mine", nil })
		expect(t, r, consumer.Success, nil)
		if r.Fence != 2 || r.Attempt != 2 {
			t.Fatalf("takeover after waiting: fence %d attempt %d, want 2 and 2", r.Fence, r.Attempt)
		}
	})
	t.Run("IsBounded", func(t *testing.T) {
		s := must(t, f, consumer.WithLease(10*time.Second), consumer.WithWaitInProgress(200*time.Millisecond))
		k := key("wait", "bounded")
		if rep := s.Begin(ctx, []consumer.Claim{{Key: k, Owner: "slow"}})[0]; !rep.Claimed() {
			t.Fatalf("claim = %+v", rep)
		}
		r := consumer.ExecuteIdempotently(ctx, s, k, nil, func(ctx context.Context) (string, error) {
			t.Error("handler ran while another owner holds the key")
			return "", nil
		})
		expect(t, r, consumer.InProgress, nil)
	})
}

func testPanic(t *testing.T, f Factory) {
	s := must(t, f)
	ctx := context.Background()
	k := key("panic")
	var runs atomic.Int32
	fn := func(ctx context.Context) (int, error) {
		if runs.Add(1) == 1 {
			panic("nil map write")
		}
		return 1, nil
	}
	r := consumer.ExecuteIdempotently(ctx, s, k, nil, fn)
	expect(t, r, consumer.Error, consumer.ErrHandlerPanic)
	var pe *consumer.PanicError
	if !errors.As(r.Err, &pe) || pe.Value != "nil map write" || len(pe.Stack) == 0 {
		t.Fatalf("panic error = %#v", r.Err)
	}
	expect(t, consumer.ExecuteIdempotently(ctx, s, k, nil, fn), consumer.Success, nil)
	if runs.Load() != 2 {
		t.Fatalf("runs = %d", runs.Load())
	}
}

func testBadInput(t *testing.T, f Factory) {
	s := must(t, f)
	ctx := context.Background()
	fn := func(ctx context.Context) (int, error) { t.Fatal("handler ran on bad input"); return 0, nil }
	for name, k := range map[string]consumer.Key{
		"empty":    "",
		"too long": consumer.Key(strings.Repeat("k", consumer.MaxKeyLen+1)),
		"not utf8": consumer.Key("\xff\xfe"),
	} {
		r := consumer.ExecuteIdempotently(ctx, s, k, nil, fn)
		if r.Outcome != consumer.Error || !errors.Is(r.Err, consumer.ErrInvalidKey) || r.Action() != consumer.DeadLetter {
			t.Fatalf("%s key: %v %v %v", name, r.Outcome, r.Err, r.Action())
		}
	}
	if _, err := consumer.ParseKey(strings.Repeat("k", consumer.MaxKeyLen+1)); !errors.Is(err, consumer.ErrInvalidKey) {
		t.Fatalf("ParseKey of an over-long key: %v", err)
	}
	r := consumer.ExecuteIdempotently[int](ctx, s, key("nil-handler"), nil, nil)
	expect(t, r, consumer.Error, consumer.ErrNilHandler)
	r = consumer.ExecuteIdempotently(ctx, nil, key("nil-store"), nil, fn)
	expect(t, r, consumer.Error, consumer.ErrInvalidConfig)
	batch := consumer.ExecuteBatch(ctx, s, []consumer.BatchItem{{Key: key("b")}},
		func(ctx context.Context, i int, it consumer.BatchItem) (int, error) { return 0, nil }, consumer.WithConcurrency(0))
	expect(t, batch[0], consumer.Error, consumer.ErrInvalidConfig)
}

func testInvalidOptions(t *testing.T, f Factory) {
	for _, tc := range []struct {
		name string
		opt  consumer.Option
		hint string
	}{
		{"lease too short", consumer.WithLease(time.Millisecond), "WithLease"},
		{"retention too short", consumer.WithRetention(time.Millisecond), "WithRetention"},
		{"zero attempts", consumer.WithMaxAttempts(0), "WithMaxAttempts"},
		{"empty scope", consumer.WithScope(""), "WithScope"},
		{"scope with brace", consumer.WithScope("a{b"), "hash tag"},
		{"prefix with brace", consumer.WithPrefix("x}"), "hash tag"},
		{"result size", consumer.WithMaxResultSize(0), "WithMaxResultSize"},
		{"nil codec", consumer.WithCodec(nil), "WithCodec"},
		{"negative wait", consumer.WithWaitInProgress(-time.Second), "WithWaitInProgress"},
	} {
		_, err := f(t, tc.opt)
		if !errors.Is(err, consumer.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.hint) {
			t.Errorf("%s: err = %v, want ErrInvalidConfig mentioning %q", tc.name, err, tc.hint)
		}
	}
}

func testBatch(t *testing.T, f Factory) {
	s := must(t, f)
	ctx := context.Background()
	// Five keys already done before the batch.
	for i := 0; i < 5; i++ {
		expect(t, consumer.ExecuteIdempotently(ctx, s, key("batch", fmt.Sprint(i)), []byte(fmt.Sprint(i)),
			func(ctx context.Context) (string, error) { return fmt.Sprint("before-", i), nil }), consumer.Success, nil)
	}
	var items []consumer.BatchItem
	for i := 0; i < 100; i++ {
		items = append(items, consumer.BatchItem{Key: key("batch", fmt.Sprint(i)), Payload: []byte(fmt.Sprint(i))})
	}
	items = append(items, items[10], items[2])                                              // repeats within the batch
	items = append(items, consumer.BatchItem{Key: items[20].Key, Payload: []byte("other")}) // conflicting repeat
	items = append(items, consumer.BatchItem{Key: ""})                                      // invalid
	var order []int
	runs := map[consumer.Key]int{}
	fn := func(ctx context.Context, i int, it consumer.BatchItem) (string, error) {
		order = append(order, i)
		runs[it.Key]++
		info, _ := consumer.InfoFromContext(ctx)
		if info.Key != it.Key || info.Fence != 1 {
			return "", fmt.Errorf("info %+v for item %d", info, i)
		}
		if i == 50 {
			return "", consumer.Permanent(errors.New("bad row"))
		}
		return "v" + string(it.Payload), nil
	}
	res := consumer.ExecuteBatch(ctx, s, items, fn)
	if len(res) != len(items) {
		t.Fatalf("%d results for %d items", len(res), len(items))
	}
	for i := 1; i < len(order); i++ {
		if order[i] <= order[i-1] {
			t.Fatalf("handlers ran out of input order: %v", order)
		}
	}
	if len(order) != 95 {
		t.Fatalf("%d handlers ran, want 95 (100 keys, 5 done before)", len(order))
	}
	for k, n := range runs {
		if n != 1 {
			t.Fatalf("key %s ran %d times", k, n)
		}
	}
	for i := 0; i < 100; i++ {
		r := res[i]
		switch {
		case i < 5:
			expect(t, r, consumer.Duplicate, nil)
			if r.Value != fmt.Sprint("before-", i) {
				t.Fatalf("item %d: %q", i, r.Value)
			}
		case i == 50:
			expect(t, r, consumer.Error, consumer.ErrPermanent)
		default:
			expect(t, r, consumer.Success, nil)
			if r.Value != fmt.Sprint("v", i) || r.Key != items[i].Key {
				t.Fatalf("item %d: %+v", i, r)
			}
		}
	}
	expect(t, res[100], consumer.Duplicate, nil)
	if res[100].Value != "v10" {
		t.Fatalf("in-batch repeat value %q", res[100].Value)
	}
	expect(t, res[101], consumer.Duplicate, nil)
	expect(t, res[102], consumer.Error, consumer.ErrPayloadConflict)
	expect(t, res[103], consumer.Error, consumer.ErrInvalidKey)

	again := consumer.ExecuteBatch(ctx, s, items[:100], fn)
	for i, r := range again {
		if r.Outcome != consumer.Duplicate {
			t.Fatalf("second batch item %d: %v %v", i, r.Outcome, r.Err)
		}
	}
	if len(order) != 95 {
		t.Fatalf("second batch ran %d handlers", len(order)-95)
	}
}

func testBatchConcurrent(t *testing.T, f Factory) {
	s := must(t, f)
	ctx := context.Background()
	var items []consumer.BatchItem
	for i := 0; i < 200; i++ {
		items = append(items, consumer.BatchItem{Key: key("conc", fmt.Sprint(i))})
	}
	var runs, running, peak atomic.Int32
	fn := func(ctx context.Context, i int, it consumer.BatchItem) (int, error) {
		runs.Add(1)
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(time.Millisecond)
		running.Add(-1)
		return i, nil
	}
	res := consumer.ExecuteBatch(ctx, s, items, fn, consumer.WithConcurrency(8), consumer.WithPerMessageCompletion(true))
	for i, r := range res {
		expect(t, r, consumer.Success, nil)
		if r.Value != i {
			t.Fatalf("item %d value %d", i, r.Value)
		}
	}
	if runs.Load() != 200 || peak.Load() > 8 || peak.Load() < 2 {
		t.Fatalf("runs %d, peak concurrency %d; want 200 and 2..8", runs.Load(), peak.Load())
	}
	for i := 0; i < 200; i += 37 {
		rec, _ := s.Peek(ctx, items[i].Key)
		if rec.State != "completed" {
			t.Fatalf("item %d record %+v", i, rec)
		}
	}
}

func testBatchCancelled(t *testing.T, f Factory) {
	s := must(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var items []consumer.BatchItem
	for i := 0; i < 10; i++ {
		items = append(items, consumer.BatchItem{Key: key("cancel", fmt.Sprint(i))})
	}
	var runs atomic.Int32
	res := consumer.ExecuteBatch(ctx, s, items, func(ctx context.Context, i int, it consumer.BatchItem) (int, error) {
		runs.Add(1)
		if i == 3 {
			cancel() // shutdown while item 3 runs
		}
		return i, nil
	})
	if runs.Load() != 4 {
		t.Fatalf("%d handlers ran, want 4", runs.Load())
	}
	for i, r := range res {
		if i <= 3 {
			expect(t, r, consumer.Success, nil)
			continue
		}
		expect(t, r, consumer.Error, context.Canceled)
		if !errors.Is(r.Err, consumer.ErrNotRun) || !r.Retryable() {
			t.Fatalf("item %d: a shutdown must be retryable", i)
		}
	}
	// The unstarted items were released: the next delivery claims them at once,
	// without counting the abandoned attempt.
	again := consumer.ExecuteBatch(context.Background(), s, items, func(ctx context.Context, i int, it consumer.BatchItem) (int, error) {
		runs.Add(1)
		return i, nil
	})
	for i, r := range again {
		want := consumer.Duplicate
		if i > 3 {
			want = consumer.Success
			if r.Attempt != 1 || r.Fence != 2 {
				t.Fatalf("item %d after release: attempt %d fence %d, want 1 and 2", i, r.Attempt, r.Fence)
			}
		}
		expect(t, r, want, nil)
	}
	if runs.Load() != 10 {
		t.Fatalf("%d handler runs in all, want 10", runs.Load())
	}
}

func testBatchStopAfterFailure(t *testing.T, f Factory) {
	s := must(t, f)
	ctx := context.Background()
	var items []consumer.BatchItem
	for i := 0; i < 6; i++ {
		items = append(items, consumer.BatchItem{Key: key("stop", fmt.Sprint(i))})
	}
	boom := errors.New("row 2 failed")
	var ran []int
	fn := func(ctx context.Context, i int, it consumer.BatchItem) (int, error) {
		ran = append(ran, i)
		if it.Key == items[2].Key {
			return 0, boom
		}
		return i, nil
	}
	res := consumer.ExecuteBatch(ctx, s, items, fn, consumer.WithStopAfterFailure(true))
	if fmt.Sprint(ran) != "[0 1 2]" {
		t.Fatalf("ran %v, want [0 1 2]", ran)
	}
	expect(t, res[0], consumer.Success, nil)
	expect(t, res[1], consumer.Success, nil)
	expect(t, res[2], consumer.Error, boom)
	for _, r := range res[3:] {
		expect(t, r, consumer.Error, consumer.ErrNotRun)
		if !r.Retryable() {
			t.Fatal("a not-run item must be retryable")
		}
	}
	// A claim that is not settled (here: a duplicate of a key that failed for
	// good) stops the batch as a handler error does.
	perm := key("stop", "permanent")
	expect(t, consumer.ExecuteIdempotently(ctx, s, perm, nil, func(ctx context.Context) (int, error) {
		return 0, consumer.Permanent(errors.New("bad"))
	}), consumer.Error, consumer.ErrPermanent)
	ran = nil
	blocked := []consumer.BatchItem{{Key: key("stop", "before")}, {Key: perm}, {Key: key("stop", "after")}}
	res = consumer.ExecuteBatch(ctx, s, blocked, fn, consumer.WithStopAfterFailure(true))
	if fmt.Sprint(ran) != "[0]" {
		t.Fatalf("ran %v, want only the item before the failed key", ran)
	}
	expect(t, res[0], consumer.Success, nil)
	expect(t, res[1], consumer.Duplicate, consumer.ErrPermanent)
	expect(t, res[2], consumer.Error, consumer.ErrNotRun)

	// The released items are claimed afresh, their attempt not counted.
	ran = nil
	res = consumer.ExecuteBatch(ctx, s, items[3:], fn, consumer.WithStopAfterFailure(true))
	for _, r := range res {
		expect(t, r, consumer.Success, nil)
		if r.Attempt != 1 {
			t.Fatalf("attempt %d after release, want 1", r.Attempt)
		}
	}
}
