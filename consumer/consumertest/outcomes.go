package consumertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idemkit/consumer"
)

// Outcomes of single executions: success, duplicates, retries, failures, conflicts.

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
	reps := st.Begin(ctx, []consumer.Claim{{Key: k2, Owner: "a", Fingerprint: consumer.FingerprintOf([]byte("a"))}})
	if !reps[0].Claimed() {
		t.Fatalf("claim = %+v", reps[0])
	}
	reps = st.Begin(ctx, []consumer.Claim{{Key: k2, Owner: "b", Fingerprint: consumer.FingerprintOf([]byte("b"))}})
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

// testAlreadyApplied: a handler that finds its effect applied by an attempt
// whose completion was lost returns the stored result with AlreadyApplied: the
// result is stored and the outcome is DUPLICATE, now and for later deliveries.
func testAlreadyApplied(t *testing.T, f Factory) {
	s := must(t, f)
	ctx := context.Background()
	k := key("already-applied")
	r := consumer.ExecuteIdempotently(ctx, s, k, nil, func(ctx context.Context) (string, error) {
		return "receipt-7", consumer.AlreadyApplied()
	})
	expect(t, r, consumer.Duplicate, nil)
	if r.Value != "receipt-7" {
		t.Fatalf("value = %q", r.Value)
	}
	dup := consumer.ExecuteIdempotently(ctx, s, k, nil, func(ctx context.Context) (string, error) {
		t.Fatal("ran again")
		return "", nil
	})
	expect(t, dup, consumer.Duplicate, nil)
	if dup.Value != "receipt-7" {
		t.Fatalf("stored value = %q", dup.Value)
	}
}

// testMarkCompleted: a handler that records its completion itself (as a
// transactional completion does, in the store's own terms) is not settled again:
// the core sends no completion, and the handler's result stands.
func testMarkCompleted(t *testing.T, f Factory) {
	s := must(t, f)
	ctx := context.Background()
	k := key("marked")
	r := consumer.ExecuteIdempotently(ctx, s, k, nil, func(ctx context.Context) (string, error) {
		if !consumer.MarkCompleted(ctx) {
			return "", errors.New("MarkCompleted refused a handler context")
		}
		return "done", nil
	})
	expect(t, r, consumer.Success, nil)
	if r.Value != "done" {
		t.Fatalf("value %q", r.Value)
	}
	// This handler only said it completed: the record shows the core sent nothing.
	if rec, err := s.Peek(ctx, k); err != nil || rec.State != "started" {
		t.Fatalf("record %+v %v: the core settled an attempt its handler had marked completed", rec, err)
	}
	if consumer.MarkCompleted(ctx) {
		t.Fatal("MarkCompleted accepted a context that is no handler's")
	}
}
