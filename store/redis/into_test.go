package redis_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
)

// BeginInto and SettleInto answer as Begin and Settle do, into the caller's
// slice, which the engines reuse from call to call.
func TestBeginIntoSettleInto(t *testing.T) {
	s := newRedisStore(t, testenv.Redis(t))
	ctx := context.Background()
	keys := []consumer.Key{"into-a", "into-b"}
	claims := []consumer.Claim{{Key: keys[0], Owner: "o1"}, {Key: keys[1], Owner: "o2"}}
	out := make([]consumer.ClaimReply, len(claims))
	s.BeginInto(ctx, claims, out)
	for i, rep := range out {
		if !rep.Claimed() || rep.Ref != s.RecordKey(keys[i]) {
			t.Fatalf("claim %d: %+v", i, rep)
		}
	}
	items := make([]consumer.Settlement, len(out))
	for i, rep := range out {
		items[i] = consumer.Settlement{Key: keys[i], Owner: claims[i].Owner, Ref: rep.Ref, Fence: rep.Fence,
			Attempts: rep.Attempts, Created: rep.Created, Complete: true, Result: []byte(`{"n":1}`)}
	}
	acks := make([]consumer.SettleReply, len(items))
	s.SettleInto(ctx, items, acks)
	for i, a := range acks {
		if a.Err != nil || a.Terminal {
			t.Fatalf("settlement %d: %+v", i, a)
		}
	}
	// The same slice again, zeroed, as the engines pass it: now duplicates, as Begin says.
	clear(out)
	s.BeginInto(ctx, []consumer.Claim{{Key: keys[0], Owner: "o3"}, {Key: keys[1], Owner: "o4"}}, out)
	want := s.Begin(ctx, []consumer.Claim{{Key: keys[0], Owner: "o5"}, {Key: keys[1], Owner: "o6"}})
	for i := range out {
		if out[i].Status != consumer.StatusCompleted || string(out[i].Result) != `{"n":1}` ||
			out[i].Status != want[i].Status || string(out[i].Result) != string(want[i].Result) || out[i].Fence != want[i].Fence {
			t.Fatalf("claim %d: BeginInto %+v, Begin %+v", i, out[i], want[i])
		}
	}
}

// An out of the wrong length, or a nil store, claims and settles nothing: each
// element of out says why.
func TestBeginIntoBadInput(t *testing.T) {
	s := newRedisStore(t, testenv.Redis(t))
	ctx := context.Background()
	claims := []consumer.Claim{{Key: "bad-into", Owner: "o"}}
	for _, c := range []struct {
		name  string
		store *redisstore.Store
		outs  int
	}{{"short out", s, 0}, {"long out", s, 2}, {"nil store", nil, 1}} {
		t.Run(c.name, func(t *testing.T) {
			out := make([]consumer.ClaimReply, c.outs)
			c.store.BeginInto(ctx, claims, out)
			for i, rep := range out {
				if !errors.Is(rep.Err, consumer.ErrInvalidConfig) {
					t.Fatalf("claim answer %d: %+v", i, rep)
				}
			}
			acks := make([]consumer.SettleReply, c.outs)
			c.store.SettleInto(ctx, []consumer.Settlement{{Key: "bad-into", Owner: "o", Fence: 1}}, acks)
			for i, a := range acks {
				if !errors.Is(a.Err, consumer.ErrInvalidConfig) {
					t.Fatalf("settle answer %d: %+v", i, a)
				}
			}
		})
	}
	if rec, err := s.Peek(ctx, "bad-into"); err != nil || rec.Found {
		t.Fatalf("a refused call wrote a record: %+v %v", rec, err)
	}
}
