package memory_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/store/memory"
)

// fakeClock moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// With a fake clock, a lease runs out and a record expires when the clock is
// moved, not after that much wall time: a 30s lease and a 24h retention cost
// nothing.
func TestWithClockLeaseAndRetention(t *testing.T) {
	ctx := context.Background()
	clock := &fakeClock{now: time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)}
	store, err := memory.NewStore(consumer.WithScope("clock"), memory.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	key := consumer.Key("k")
	begin := func(owner string) consumer.ClaimReply {
		t.Helper()
		rep := store.Begin(ctx, []consumer.Claim{{Key: key, Owner: owner, Start: true}})[0]
		if rep.Err != nil {
			t.Fatal(rep.Err)
		}
		return rep
	}
	if rep := begin("a"); rep.Status != consumer.StatusAcquired || rep.Fence != 1 {
		t.Fatalf("first claim: %v fence %d, want ACQUIRED fence 1", rep.Status, rep.Fence)
	}
	rec, err := store.Peek(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Now.Equal(clock.Now()) || !rec.LeaseUntil.Equal(clock.Now().Add(consumer.DefaultLease)) {
		t.Fatalf("peek: now %v lease until %v; want the fake clock's %v and %v later", rec.Now, rec.LeaseUntil,
			clock.Now(), consumer.DefaultLease)
	}
	clock.advance(consumer.DefaultLease - time.Millisecond)
	if rep := begin("b"); rep.Status != consumer.StatusInProgress || rep.Lease != time.Millisecond {
		t.Fatalf("claim 1ms before the lease runs out: %v lease %v, want IN_PROGRESS 1ms", rep.Status, rep.Lease)
	}
	clock.advance(time.Millisecond)
	rep := begin("b")
	if rep.Status != consumer.StatusTakenOver || rep.Fence != 2 || rep.Attempts != 2 {
		t.Fatalf("claim once the lease ran out: %v fence %d attempts %d, want TAKEN_OVER fence 2 attempts 2",
			rep.Status, rep.Fence, rep.Attempts)
	}
	if errs := store.Extend(ctx, []consumer.Owned{{Key: key, Owner: "a", Fence: 1}}); !errors.Is(errs[0], consumer.ErrLeaseLost) {
		t.Fatalf("the first owner's renewal after the takeover: %v, want ErrLeaseLost", errs[0])
	}
	st := consumer.Settlement{Key: key, Owner: "b", Fence: rep.Fence, Attempts: rep.Attempts, Complete: true, Result: []byte(`1`)}
	if r := store.Settle(ctx, []consumer.Settlement{st})[0]; r.Err != nil {
		t.Fatal(r.Err)
	}
	if rep := begin("c"); rep.Status != consumer.StatusCompleted {
		t.Fatalf("claim after the completion: %v, want COMPLETED", rep.Status)
	}
	rec, err = store.Peek(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	clock.advance(rec.TTL - time.Millisecond)
	if rep := begin("c"); rep.Status != consumer.StatusCompleted {
		t.Fatalf("claim 1ms before the record expires: %v, want COMPLETED", rep.Status)
	}
	clock.advance(time.Millisecond)
	if rep := begin("c"); rep.Status != consumer.StatusAcquired || rep.Fence != 1 || rep.Attempts != 1 {
		t.Fatalf("claim once the record expired: %v fence %d attempts %d, want a new record: ACQUIRED fence 1 attempt 1",
			rep.Status, rep.Fence, rep.Attempts)
	}
}

// A nil clock is refused with a message that says what to do.
func TestWithClockNil(t *testing.T) {
	for name, c := range map[string]memory.Clock{"nil interface": nil, "nil pointer": (*fakeClock)(nil)} {
		_, err := memory.NewStore(memory.WithClock(c))
		if !errors.Is(err, consumer.ErrInvalidConfig) {
			t.Errorf("%s: NewStore: %v, want ErrInvalidConfig", name, err)
		}
	}
}
