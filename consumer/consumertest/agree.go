package consumertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/store/memory"
)

// Agree runs thousands of random Begin, Settle, Extend and Release calls (single
// items and two-item batches, which may name one key twice) on a few keys against
// a store from newStore and against the memory store, and fails t at the first
// reply or record (read back with Peek) in which they differ. The memory store is
// the reference: a store that agrees with it on every step has its semantics,
// including the answers to calls sent again after a lost reply.
func Agree(t *testing.T, newStore Factory) {
	ctx := context.Background()
	for seed := uint64(1); seed <= 25; seed++ {
		rnd := rand.New(rand.NewPCG(seed, 11))
		opts := []consumer.Option{consumer.WithLease(time.Minute), consumer.WithMaxAttempts(1 + rnd.IntN(4))}
		mem, err := memory.NewStore(opts...)
		if err != nil {
			t.Fatal(err)
		}
		other := must(t, newStore, opts...)
		keys := []consumer.Key{"a", "b", "c"}
		owners := []string{"o1", "o2", "o3", "o4"}
		fps := []consumer.Fingerprint{{}, consumer.FingerprintOf([]byte("x")), consumer.FingerprintOf([]byte("y"))}
		claims := map[string]consumer.ClaimReply{} // owner+key -> what its last claim got
		for step := 0; step < 400; step++ {
			k := keys[rnd.IntN(len(keys))]
			o := owners[rnd.IntN(len(owners))]
			h := claims[o+string(k)]
			fence := h.Fence
			if cur, _ := mem.Peek(ctx, k); rnd.IntN(8) == 0 && cur.Owner != o {
				// A stale or made-up fence (0: unknown) from a caller that does not
				// hold the claim: the holder always repeats its claim as Begin answered.
				fence = int64(rnd.IntN(4))
			}
			var a, b string
			switch op := rnd.IntN(7); op {
			case 0, 1, 6:
				cl := []consumer.Claim{{Key: k, Owner: o, Fingerprint: fps[rnd.IntN(3)], Locked: rnd.IntN(4) == 0,
					Start: rnd.IntN(2) == 0}}
				if op == 6 { // a batch of two claims by one owner, perhaps of one key
					cl = append(cl, consumer.Claim{Key: keys[rnd.IntN(len(keys))], Owner: o, Fingerprint: fps[rnd.IntN(3)],
						Start: rnd.IntN(2) == 0})
				}
				x, y := mem.Begin(ctx, cl), other.Begin(ctx, cl)
				for i := range cl {
					if y[i].Claimed() {
						claims[o+string(cl[i].Key)] = y[i]
						if x[i].Fingerprint != y[i].Fingerprint {
							t.Fatalf("seed %d step %d: claimed fingerprints differ: %s, %s", seed, step, x[i].Fingerprint, y[i].Fingerprint)
						}
					}
					a += describeClaim(x[i])
					b += describeClaim(y[i])
				}
			case 2, 3:
				st := []consumer.Settlement{{Key: k, Owner: o, Fence: fence, Attempts: h.Attempts, Created: h.Created,
					Fingerprint: h.Fingerprint, Complete: rnd.IntN(2) == 0,
					Result: []byte(fmt.Sprint("r", step)), Permanent: rnd.IntN(3) == 0, Message: fmt.Sprint("m", step)}}
				if rnd.IntN(6) == 0 {
					st[0].Dropped = "123"
				}
				x, y := mem.Settle(ctx, st)[0], other.Settle(ctx, st)[0]
				a = fmt.Sprintf("settle %v %v", x.Terminal, errKind(x.Err))
				b = fmt.Sprintf("settle %v %v", y.Terminal, errKind(y.Err))
			case 4:
				ow := []consumer.Owned{{Key: k, Owner: o, Fence: fence}}
				a = fmt.Sprintf("extend %v", errKind(mem.Extend(ctx, ow)[0]))
				b = fmt.Sprintf("extend %v", errKind(other.Extend(ctx, ow)[0]))
			case 5:
				ow := []consumer.Owned{{Key: k, Owner: o, Fence: fence}}
				a = fmt.Sprintf("release %v", errKind(mem.Release(ctx, ow)[0]))
				b = fmt.Sprintf("release %v", errKind(other.Release(ctx, ow)[0]))
			}
			for _, k := range keys {
				ra, _ := mem.Peek(ctx, k)
				rb, _ := other.Peek(ctx, k)
				a += " | " + describe(ra)
				b += " | " + describe(rb)
			}
			if a != b {
				t.Fatalf("seed %d step %d key %s owner %s fence %d:\n memory: %s\n store:  %s", seed, step, k, o, fence, a, b)
			}
		}
	}
}

func describeClaim(r consumer.ClaimReply) string {
	return fmt.Sprintf("begin %v f%d a%d %q %q %q %v %v; ", r.Status, r.Fence, r.Attempts, r.Result, r.Dropped, r.Message, r.Permanent, r.Err)
}

func errKind(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, consumer.ErrLeaseLost):
		return "lease-lost"
	case errors.Is(err, consumer.ErrCorruptRecord):
		return "corrupt"
	}
	return "error: " + err.Error()
}

func describe(r consumer.Record) string {
	if !r.Found {
		return "none"
	}
	var hist []string
	for _, h := range r.History {
		hist = append(hist, h.Message)
	}
	return fmt.Sprintf("%s owner=%q f%d a%d fp=%s result=%q dropped=%q err=%q hist=%q perm=%v locked=%v counted=%v",
		r.State, r.Owner, r.Fence, r.Attempts, r.Fingerprint, r.Result, r.Dropped, r.Error, hist, r.Permanent, r.Locked, r.Counted)
}
