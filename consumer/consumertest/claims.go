package consumertest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
)

// Claims are not attempts: a claim made ahead of its handler is charged only once
// the handler starts (Claim.Start), so owners that die holding claims they never
// ran use up no attempts.

// testClaimsAreNotAttempts: claims made without Start and left to expire, more
// times than the attempts allowed, are taken over without a charge; the key is
// never exhausted and its handler still runs.
func testClaimsAreNotAttempts(t *testing.T, f Factory) {
	lease := liveLease // the last delivery's claim, run and completion fit in it
	s := must(t, f, consumer.WithLease(lease), consumer.WithMaxAttempts(1))
	ctx := context.Background()
	k := key("claims-ahead")
	var fence int64
	for i := range 4 {
		rep := s.Begin(ctx, []consumer.Claim{{Key: k, Owner: fmt.Sprint("dead-", i)}})[0]
		want := consumer.StatusTakenOver
		if i == 0 {
			want = consumer.StatusAcquired
		}
		if rep.Err != nil || rep.Status != want || rep.Attempts != 1 || rep.Fence != fence+1 {
			t.Fatalf("claim %d made ahead of its handler = %+v, want %v, attempt 1, fence %d", i, rep, want, fence+1)
		}
		fence = rep.Fence
		if rec, err := s.Peek(ctx, k); err != nil || rec.Counted || rec.Attempts != 1 {
			t.Fatalf("record after claim %d = %+v (%v), want attempt 1, not counted", i, rec, err)
		}
		time.Sleep(lease + 30*time.Millisecond) // its owner dies before the handler starts
	}
	var runs atomic.Int32
	r := consumer.ExecuteIdempotently(ctx, s, k, nil, func(ctx context.Context) (int, error) {
		runs.Add(1)
		return 7, nil
	})
	expect(t, r, consumer.Success, nil)
	if runs.Load() != 1 || r.Value != 7 || r.Attempt != 1 {
		t.Fatalf("after four dead claim holders: %d runs, %+v; want one run, attempt 1", runs.Load(), r)
	}
}

// testStartMarksOwnClaim: a claim sent again with Start by its own owner answers
// the same claim and marks it counted; a takeover then charges it, and on the
// last attempt exhausts the key.
func testStartMarksOwnClaim(t *testing.T, f Factory) {
	lease := 100 * time.Millisecond
	s := must(t, f, consumer.WithLease(lease), consumer.WithMaxAttempts(2))
	ctx := context.Background()
	k := key("start")
	a := s.Begin(ctx, []consumer.Claim{{Key: k, Owner: "a"}})[0]
	again := s.Begin(ctx, []consumer.Claim{{Key: k, Owner: "a", Start: true}})[0]
	if !again.Claimed() || again.Fence != a.Fence || again.Attempts != a.Attempts {
		t.Fatalf("own claim sent again with Start = %+v, want the same claim as %+v", again, a)
	}
	if rec, _ := s.Peek(ctx, k); !rec.Counted || rec.Owner != "a" || rec.Fence != a.Fence {
		t.Fatalf("record after Start = %+v, want a's claim, counted", rec)
	}
	time.Sleep(lease + 30*time.Millisecond) // a dies while its handler runs
	b := s.Begin(ctx, []consumer.Claim{{Key: k, Owner: "b", Start: true}})[0]
	if b.Status != consumer.StatusTakenOver || b.Attempts != 2 || b.Fence != a.Fence+1 {
		t.Fatalf("takeover of a counted claim = %+v, want TAKEN_OVER attempt 2 fence %d", b, a.Fence+1)
	}
	time.Sleep(lease + 30*time.Millisecond) // b dies too, on the last attempt
	c := s.Begin(ctx, []consumer.Claim{{Key: k, Owner: "c"}})[0]
	if c.Status != consumer.StatusExhausted {
		t.Fatalf("claim after the last counted attempt died = %+v, want EXHAUSTED", c)
	}
}

// testTakenOverClaimsRunCounted: the engine marks a claim it took over counted
// before its handler starts, so that a message that kills its worker every time
// uses its attempts up; a fresh claim's handler runs uncounted until it settles.
func testTakenOverClaimsRunCounted(t *testing.T, f Factory) {
	// The handlers below read the store while their claims live: liveLease keeps
	// them renewed on a slow server (100 ms ran out on a loaded one).
	lease := liveLease
	s := must(t, f, consumer.WithLease(lease))
	ctx := context.Background()
	fresh, taken := key("run", "fresh"), key("run", "taken")
	if rep := s.Begin(ctx, []consumer.Claim{{Key: taken, Owner: "dead"}})[0]; !rep.Claimed() {
		t.Fatalf("claim = %+v", rep)
	}
	time.Sleep(lease + 30*time.Millisecond)
	counted := map[consumer.Key]bool{}
	res := consumer.ExecuteBatch(ctx, s, []consumer.BatchItem{{Key: fresh}, {Key: taken}},
		func(ctx context.Context, i int, it consumer.BatchItem) (int, error) {
			rec, err := s.Peek(ctx, it.Key)
			if err != nil {
				return 0, err
			}
			counted[it.Key] = rec.Counted
			return i, nil
		})
	for _, r := range res {
		expect(t, r, consumer.Success, nil)
	}
	if counted[fresh] || !counted[taken] {
		t.Fatalf("counted while the handlers ran: fresh %v, taken over %v; want false, true", counted[fresh], counted[taken])
	}
	if res[1].Attempt != 1 {
		t.Fatalf("the taken-over claim ran as attempt %d, want 1 (its first owner never ran it)", res[1].Attempt)
	}
}
