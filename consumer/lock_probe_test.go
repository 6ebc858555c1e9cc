package consumer_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
)

// fixedLock is a Locker whose answer is fixed: every lock is granted (true) or
// held elsewhere (false).
type fixedLock bool

func (l fixedLock) TryAcquire(ctx context.Context, _ string) (context.Context, func(), bool, error) {
	if !l {
		return nil, nil, false, nil
	}
	return ctx, func() {}, true, nil
}

// watchedStore is a real store that counts the calls that change records and,
// during its first Begin, lets a rival delivery run (the moment a claim made
// only to read the record would be live).
type watchedStore struct {
	consumer.Store
	begins, releases atomic.Int32
	during           func()
}

func (w *watchedStore) Begin(ctx context.Context, claims []consumer.Claim) []consumer.ClaimReply {
	w.begins.Add(1)
	out := w.Store.Begin(ctx, claims)
	if f := w.during; f != nil {
		w.during = nil
		f()
	}
	return out
}

func (w *watchedStore) Release(ctx context.Context, items []consumer.Owned) []error {
	w.releases.Add(1)
	return w.Store.Release(ctx, items)
}

// A delivery that finds the key's lock held elsewhere only reads the record: it
// creates no record, claims nothing and spends no attempt, so with one attempt
// allowed the lock holder's delivery still runs the job, once, as attempt 1,
// whether it comes after the refused delivery or while that delivery is at work.
func TestRefusedLockSpendsNoAttempt(t *testing.T) {
	c := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	refused, err := redisstore.NewStore(c, consumer.WithPrefix(prefix), consumer.WithMaxAttempts(1),
		consumer.WithLock(fixedLock(false)))
	if err != nil {
		t.Fatal(err)
	}
	holder, err := redisstore.NewStore(c, consumer.WithPrefix(prefix), consumer.WithMaxAttempts(1),
		consumer.WithLock(fixedLock(true)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, rival := range []bool{false, true} {
		key := consumer.Key("nightly-export-alone")
		if rival {
			key = "nightly-export-raced"
		}
		var runs atomic.Int32
		job := func(context.Context) (int, error) { runs.Add(1); return 7, nil }
		var held consumer.Result[int]
		heldRan := false
		runHolder := func() { heldRan, held = true, consumer.ExecuteIdempotently(ctx, holder, key, nil, job) }
		prober := &watchedStore{Store: refused}
		if rival {
			prober.during = runHolder
		}
		probed := consumer.ExecuteIdempotently(ctx, prober, key, nil, job)
		if n, m := prober.begins.Load(), prober.releases.Load(); n != 0 || m != 0 {
			t.Errorf("rival %v: the delivery without the lock made %d claims and %d releases, want 0 and 0", rival, n, m)
		}
		if probed.Outcome != consumer.InProgress && probed.Outcome != consumer.Duplicate {
			t.Errorf("rival %v: the delivery without the lock: %v %v, want IN_PROGRESS or DUPLICATE", rival, probed.Outcome, probed.Err)
		}
		if !heldRan {
			if rec, err := refused.Peek(ctx, key); err != nil || rec.Found {
				t.Errorf("rival %v: after the delivery without the lock the record is %+v (%v), want none", rival, rec, err)
			}
			runHolder()
		}
		if held.Outcome != consumer.Success || held.Value != 7 || held.Attempt != 1 || held.Fence != 1 || runs.Load() != 1 {
			t.Errorf("rival %v: lock holder: %v %v attempt %d fence %d after %d runs; want SUCCESS 7, attempt 1, fence 1, 1 run",
				rival, held.Outcome, held.Err, held.Attempt, held.Fence, runs.Load())
		}
		rec, err := refused.Peek(ctx, key)
		if err != nil || rec.State != "completed" || rec.Attempts != 1 {
			t.Errorf("rival %v: record %+v (%v), want completed after 1 attempt", rival, rec, err)
		}
	}
}
