package consumertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
)

// Leases and owners: takeovers, renewals, lost leases, releases.

// testTakeover drives the store directly: owner A claims and stalls (no renewal);
// after the lease B takes over with a larger fence; A's late completion is refused
// and changes nothing.
func testTakeover(t *testing.T, f Factory) {
	lease := liveLease // B's first claim must find A's lease live
	s := must(t, f, consumer.WithLease(lease))
	ctx := context.Background()
	k := key("takeover")
	a := s.Begin(ctx, []consumer.Claim{{Key: k, Owner: "owner-a", Start: true}})[0]
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
	lease := liveLease // the last delivery's claim is answered within it
	s := must(t, f, consumer.WithLease(lease), consumer.WithMaxAttempts(2))
	ctx := context.Background()
	k := key("crashloop")
	for i, want := range []consumer.ClaimStatus{consumer.StatusAcquired, consumer.StatusTakenOver, consumer.StatusExhausted} {
		rep := s.Begin(ctx, []consumer.Claim{{Key: k, Owner: fmt.Sprint("crasher-", i), Start: true}})[0]
		if rep.Err != nil || rep.Status != want {
			t.Fatalf("claim %d = %+v, want %v", i, rep, want)
		}
		if want != consumer.StatusExhausted {
			time.Sleep(lease + 30*time.Millisecond) // the owner "crashes": no renewal, no completion
		}
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

// testHeartbeat: a handler that outlives its lease many times over keeps its
// claim. It waits for renewals the store shows rather than for wall time, so a
// slow machine makes it longer, never wrong.
func testHeartbeat(t *testing.T, f Factory) {
	// Renewals every lease/3 must land, and each probe's claim be answered, on a
	// loaded server: 900 ms let a lease run out between renewals there.
	lease := 2 * liveLease
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
	first, err := s.Peek(ctx, k)
	if err != nil || first.State != "started" {
		t.Fatalf("record = %+v, %v", first, err)
	}
	// Wait until the handler has outlived three whole leases of its first claim.
	deadline := time.Now().Add(20 * lease)
	for {
		rec, err := s.Peek(ctx, k)
		if err != nil || rec.State != "started" || rec.Owner != first.Owner {
			t.Fatalf("record while the handler runs = %+v, %v", rec, err)
		}
		if rec.Now.Sub(first.LeaseUntil) > 2*lease {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease was not renewed: %+v", rec)
		}
		r := consumer.ExecuteIdempotently(ctx, s, k, nil, func(ctx context.Context) (int, error) {
			runs.Add(1)
			return 0, nil
		})
		expect(t, r, consumer.InProgress, nil)
		if r.LeaseLeft <= 0 || r.Action() != consumer.Wait {
			t.Fatalf("in progress: lease left %v, action %v", r.LeaseLeft, r.Action())
		}
		time.Sleep(lease / 4)
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
	// The claim is answered within the lease; then the renewals fail, and the
	// release of the lost claim is bounded by the lease's margin (11%): two
	// seconds give it 220 ms on a loaded server.
	lease := 2 * liveLease
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
	lease := liveLease // A's and B's claims are answered within it
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
	select {
	case <-aStarted:
	case r := <-aDone:
		t.Fatalf("A's handler never started: %v %v", r.Outcome, r.Err)
	}
	time.Sleep(lease + 40*time.Millisecond)
	b := consumer.ExecuteIdempotently(ctx, base, k, nil, func(ctx context.Context) (string, error) {
		runs.Add(1)
		return "b", nil
	})
	expect(t, b, consumer.Success, nil)
	// A's claim was fresh and never settled: its run is not charged to B.
	if b.Fence != 2 || b.Attempt != 1 {
		t.Fatalf("takeover fence/attempt = %d/%d, want 2/1", b.Fence, b.Attempt)
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

// testResend: every transition sent again with the same arguments, as a client
// does after a lost reply, answers as the first call did and changes nothing.
func testResend(t *testing.T, f Factory) {
	s := must(t, f, consumer.WithMaxAttempts(3))
	ctx := context.Background()
	claim := func(k consumer.Key, owner string) consumer.ClaimReply {
		t.Helper()
		a := s.Begin(ctx, []consumer.Claim{{Key: k, Owner: owner, Fingerprint: consumer.FingerprintOf([]byte("fp"))}})[0]
		b := s.Begin(ctx, []consumer.Claim{{Key: k, Owner: owner, Fingerprint: consumer.FingerprintOf([]byte("fp"))}})[0]
		if !a.Claimed() || b.Status != consumer.StatusAcquired || b.Fence != a.Fence || b.Attempts != a.Attempts ||
			b.Lease <= 0 || b.Lease > s.Settings().Lease {
			t.Fatalf("claim %+v, sent again %+v: want the same claim with its lease left", a, b)
		}
		return a
	}
	for _, tc := range []struct {
		name     string
		st       consumer.Settlement
		terminal bool
		state    string
	}{
		{"complete", consumer.Settlement{Complete: true, Result: []byte(`"ok"`)}, false, "completed"},
		{"fail", consumer.Settlement{Message: "boom"}, false, "retry"},
		{"fail permanently", consumer.Settlement{Permanent: true, Message: "declined"}, true, "failed"},
	} {
		k := key("resend", tc.name)
		c := claim(k, "owner-1")
		tc.st.Key, tc.st.Owner, tc.st.Ref, tc.st.Fence, tc.st.Attempts = k, "owner-1", c.Ref, c.Fence, c.Attempts
		for i := 0; i < 2; i++ {
			rep := s.Settle(ctx, []consumer.Settlement{tc.st})[0]
			if rep.Err != nil || rep.Terminal != tc.terminal {
				t.Fatalf("%s, call %d: %+v", tc.name, i+1, rep)
			}
		}
		rec, _ := s.Peek(ctx, k)
		if rec.State != tc.state || rec.Attempts != c.Attempts || rec.Fence != c.Fence {
			t.Fatalf("%s: record %+v", tc.name, rec)
		}
		// Another owner's late call is still refused.
		other := tc.st // an earlier attempt of the key, long taken over
		other.Owner, other.Fence = "owner-0", c.Fence-1
		if err := s.Settle(ctx, []consumer.Settlement{other})[0].Err; !errors.Is(err, consumer.ErrLeaseLost) {
			t.Fatalf("%s by another owner: %v", tc.name, err)
		}
	}
	k := key("resend", "release")
	c := claim(k, "owner-1")
	for i := 0; i < 2; i++ {
		if err := s.Release(ctx, []consumer.Owned{{Key: k, Owner: "owner-1", Fence: c.Fence}})[0]; err != nil {
			t.Fatalf("release, call %d: %v", i+1, err)
		}
	}
	rec, _ := s.Peek(ctx, k)
	if rec.State != "retry" || rec.Attempts != c.Attempts-1 {
		t.Fatalf("after a release sent twice: %+v, want retry with attempts %d", rec, c.Attempts-1)
	}
}

// testLockedClaims: a claim made by a caller holding the key's lock is recorded
// as such; a later lock holder takes over a live claim made under the lock (its
// holder lost the lock) but never a live claim made without it.
func testLockedClaims(t *testing.T, f Factory) {
	s := must(t, f, consumer.WithLease(time.Minute))
	ctx := context.Background()
	under, plain := key("locked", "under"), key("locked", "plain")
	a := s.Begin(ctx, []consumer.Claim{{Key: under, Owner: "a", Locked: true, Start: true}, {Key: plain, Owner: "p", Start: true}})
	if !a[0].Claimed() || !a[1].Claimed() {
		t.Fatalf("claims = %+v", a)
	}
	if rec, _ := s.Peek(ctx, under); !rec.Locked {
		t.Fatalf("a claim made under the lock reads %+v", rec)
	}
	if rec, _ := s.Peek(ctx, plain); rec.Locked {
		t.Fatalf("a claim made without the lock reads %+v", rec)
	}
	// Without the lock, neither live claim is taken over.
	for _, k := range []consumer.Key{under, plain} {
		if rep := s.Begin(ctx, []consumer.Claim{{Key: k, Owner: "b"}})[0]; rep.Status != consumer.StatusInProgress {
			t.Fatalf("claim without the lock over a live claim = %v", rep.Status)
		}
	}
	b := s.Begin(ctx, []consumer.Claim{{Key: under, Owner: "b", Locked: true}, {Key: plain, Owner: "b", Locked: true}})
	if b[0].Status != consumer.StatusTakenOver || b[0].Fence != a[0].Fence+1 || b[0].Attempts != 2 {
		t.Fatalf("lock holder over a claim made under the lock = %+v, want TAKEN_OVER fence %d attempt 2", b[0], a[0].Fence+1)
	}
	if b[1].Status != consumer.StatusInProgress || b[1].Lease <= 0 {
		t.Fatalf("lock holder over a live claim made without the lock = %+v, want IN_PROGRESS", b[1])
	}
	if rec, _ := s.Peek(ctx, plain); rec.Owner != "p" || rec.Fence != 1 || rec.Attempts != 1 {
		t.Fatalf("the claim made without the lock changed: %+v", rec)
	}
	if err := s.Settle(ctx, []consumer.Settlement{{Key: under, Owner: "a", Complete: true}})[0].Err; !errors.Is(err, consumer.ErrLeaseLost) {
		t.Fatalf("the old holder's completion: %v, want lease lost", err)
	}
}
