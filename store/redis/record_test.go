package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/consumer/consumertest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/memory"
	redisstore "github.com/idemkit/idemkit/store/redis"
)

// ttlNear fails t unless the record's TTL is within [lo, hi].
func ttlNear(t *testing.T, s consumer.Store, k consumer.Key, what string, lo, hi time.Duration) consumer.Record {
	t.Helper()
	rec, err := s.Peek(context.Background(), k)
	if err != nil || !rec.Found {
		t.Fatalf("%s: %+v %v", what, rec, err)
	}
	if rec.TTL < lo || rec.TTL > hi {
		t.Fatalf("%s: TTL %v, want %v..%v", what, rec.TTL, lo, hi)
	}
	return rec
}

// The TTL at each transition: a claim and each renewal live lease + retention; a
// settlement within the lease keeps what is left of it (at least the retention);
// one after the lease ran out, or a release, starts the retention afresh.
func TestRecordTTLAtEachTransition(t *testing.T) {
	lease, ret := 400*time.Millisecond, 10*time.Second
	s := newRedisStore(t, testenv.Redis(t), consumer.WithLease(lease), consumer.WithRetention(ret))
	ctx := context.Background()
	claim := func(k consumer.Key) consumer.ClaimReply {
		rep := s.Begin(ctx, []consumer.Claim{{Key: k, Owner: "o-" + string(k)}})[0]
		if !rep.Claimed() {
			t.Fatalf("claim %s: %+v", k, rep)
		}
		return rep
	}
	settle := func(k consumer.Key, c consumer.ClaimReply, st consumer.Settlement) {
		st.Key, st.Owner, st.Ref, st.Fence, st.Attempts, st.Created = k, "o-"+string(k), c.Ref, c.Fence, c.Attempts, c.Created
		if rep := s.Settle(ctx, []consumer.Settlement{st})[0]; rep.Err != nil {
			t.Fatalf("settle %s: %v", k, rep.Err)
		}
	}
	const slack = 100 * time.Millisecond

	c := claim("a")
	rec := ttlNear(t, s, "a", "claim", lease+ret-slack, lease+ret)
	if left := rec.LeaseUntil.Sub(rec.Now); left <= lease-slack || left > lease {
		t.Fatalf("lease left after the claim: %v", left)
	}
	time.Sleep(lease / 2)
	if err := s.Extend(ctx, []consumer.Owned{{Key: "a", Owner: "o-a", Ref: c.Ref}})[0]; err != nil {
		t.Fatal(err)
	}
	ttlNear(t, s, "a", "renewal", lease+ret-slack, lease+ret)
	settle("a", c, consumer.Settlement{Complete: true, Result: []byte(`1`)})
	ttlNear(t, s, "a", "completion within the lease", ret, lease+ret)

	c = claim("b")
	time.Sleep(lease + 50*time.Millisecond)
	settle("b", c, consumer.Settlement{Complete: true, Result: []byte(`1`), Late: true})
	ttlNear(t, s, "b", "completion after the lease", ret-slack, ret)

	c = claim("c")
	settle("c", c, consumer.Settlement{Message: "boom"})
	ttlNear(t, s, "c", "failure within the lease", ret, lease+ret)

	c = claim("d")
	time.Sleep(lease + 50*time.Millisecond)
	settle("d", c, consumer.Settlement{Message: "boom", Permanent: true})
	ttlNear(t, s, "d", "failure after the lease", ret-slack, ret)

	c = claim("e")
	if err := s.Release(ctx, []consumer.Owned{{Key: "e", Owner: "o-e", Ref: c.Ref, Fence: c.Fence}})[0]; err != nil {
		t.Fatal(err)
	}
	ttlNear(t, s, "e", "release", ret-slack, ret)
}

// A live lease is judged by the retention recorded in the record, not by the
// reader's: a deploy that changes the retention cannot make another worker's live
// lease look expired, on the Redis server's clock.
func TestLeaseSurvivesARetentionChange(t *testing.T) {
	c := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	lease := 500 * time.Millisecond
	old, err := redisstore.NewStore(c, consumer.WithPrefix(prefix), consumer.WithLease(lease), consumer.WithRetention(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	changed, err := redisstore.NewStore(c, consumer.WithPrefix(prefix), consumer.WithLease(lease), consumer.WithRetention(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a := old.Begin(ctx, []consumer.Claim{{Key: "k", Owner: "a"}})[0]
	b := changed.Begin(ctx, []consumer.Claim{{Key: "k", Owner: "b"}})[0]
	if b.Status != consumer.StatusInProgress || b.Lease <= 0 || b.Lease > lease {
		t.Fatalf("during A's lease, under a longer retention: %+v, want IN_PROGRESS with at most %v left", b, lease)
	}
	shorter, err := redisstore.NewStore(c, consumer.WithPrefix(prefix), consumer.WithLease(lease), consumer.WithRetention(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	b2 := changed.Begin(ctx, []consumer.Claim{{Key: "k2", Owner: "a"}})[0] // claimed under the long retention
	if !b2.Claimed() {
		t.Fatal(b2)
	}
	if rep := shorter.Begin(ctx, []consumer.Claim{{Key: "k2", Owner: "b"}})[0]; rep.Status != consumer.StatusInProgress {
		t.Fatalf("during the lease, under a shorter retention: %+v, want IN_PROGRESS", rep)
	}
	time.Sleep(lease + 50*time.Millisecond)
	b = changed.Begin(ctx, []consumer.Claim{{Key: "k", Owner: "b"}})[0]
	if b.Status != consumer.StatusTakenOver || b.Fence != a.Fence+1 {
		t.Fatalf("after A's lease: %+v, want TAKEN_OVER", b)
	}
	rec, _ := changed.Peek(ctx, "k")
	if rec.Retention != time.Hour {
		t.Fatalf("the new claim records retention %v, want its own 1h", rec.Retention)
	}
}

// An error of a megabyte is kept at MaxErrorText bytes with a marker, older
// errors in the history are cut shorter, and nothing later chokes on it.
func TestErrorTextIsCapped(t *testing.T) {
	for name, s := range map[string]consumer.Store{
		"redis":  newRedisStore(t, testenv.Redis(t), consumer.WithMaxAttempts(6)),
		"memory": must(memory.NewStore(consumer.WithMaxAttempts(6))),
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			huge := strings.Repeat("stack frame\n", 100_000) // 1.2 MB
			for i := 0; i < 5; i++ {
				msg := fmt.Sprintf("attempt %d: %s", i+1, huge)
				r := consumer.ExecuteIdempotently(ctx, s, "poison", nil, func(context.Context) (int, error) {
					return 0, errors.New(msg)
				})
				if r.Outcome != consumer.Error {
					t.Fatalf("attempt %d: %v", i+1, r.Outcome)
				}
			}
			rec, err := s.Peek(ctx, "poison")
			if err != nil || rec.State != "retry" || rec.Attempts != 5 {
				t.Fatalf("record: %v %v", rec.State, err)
			}
			if len(rec.Error) > consumer.MaxErrorText || !strings.HasPrefix(rec.Error, "attempt 5: ") || !strings.Contains(rec.Error, "cut from") {
				t.Fatalf("last error: %d bytes, starts %q", len(rec.Error), rec.Error[:20])
			}
			if len(rec.History) != consumer.HistoryLen {
				t.Fatalf("history of %d, want %d", len(rec.History), consumer.HistoryLen)
			}
			for i, h := range rec.History[1:] {
				if len(h.Message) > consumer.HistoryText || !strings.HasPrefix(h.Message, fmt.Sprintf("attempt %d: ", 4-i)) {
					t.Fatalf("history %d: %d bytes %q", i+1, len(h.Message), h.Message[:12])
				}
			}
			last := consumer.ExecuteIdempotently(ctx, s, "poison", nil, func(context.Context) (int, error) { return 6, nil })
			if last.Outcome != consumer.Success || last.Attempt != 6 {
				t.Fatalf("a later attempt: %v %v", last.Outcome, last.Err)
			}
		})
	}
}

func must[S any](s S, err error) S {
	if err != nil {
		panic(err)
	}
	return s
}

// The memory store and the Redis store answer alike: thousands of random
// operations on a few keys, every reply and every record compared.
func TestMemoryAndRedisAgree(t *testing.T) {
	c := testenv.Redis(t)
	consumertest.Agree(t, func(t *testing.T, opts ...consumer.Option) (consumer.Store, error) {
		return redisstore.NewStore(c, append(opts, consumer.WithPrefix(testenv.Prefix(t)))...)
	})
}
