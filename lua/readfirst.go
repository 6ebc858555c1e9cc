package lua

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// readFirst reads the records of the items marked ReadFirst (and not Start), in
// one round trip of GETs, and answers those that are settled: a completed or
// failed record whose fingerprint does not differ from the claim's is answered
// from the read (see settledReply), without a script. It returns the items left
// to claim: fresh holds those whose key has no record (and the items not read),
// for the SET NX claim; existing those whose record the begin script must
// decide (started, retry, forgotten, a fingerprint that differs, a value that is
// not a record).
//
// Reading outside a script is safe here because the read decides only what a
// settled record answers, and a settled record does not change under a claim:
// only an operator's rerun or forget moves it on. The GET reads the value at one
// instant, as the script would have; the answer is the one the script would have
// given at that instant. Nothing is written from a read. The read is a GETEX
// without options (Redis 6.2+, the store's floor): it changes nothing, but Redis
// flags it a write, so go-redis sends it to the primary even on a client that
// routes reads to replicas (ReadOnly, RouteByLatency, RouteRandomly), where a
// lagging replica could still hold a record an operator has rerun or forgotten.
func (r *Runner) readFirst(ctx context.Context, b BeginBatch, reads int) (fresh, existing []int) {
	n := b.Len()
	idx := make([]int, 0, reads)
	cmds := make([]*redis.StringCmd, 0, reads)
	for i := 0; i < n; i++ {
		it := b.Item(i)
		if it.ReadFirst && !it.Start {
			idx = append(idx, i)
			cmds = append(cmds, redis.NewStringCmd(ctx, "getex", it.Key))
		} else {
			fresh = append(fresh, i)
		}
	}
	send := func() struct{} {
		if len(cmds) == 1 {
			_ = r.c.Process(ctx, cmds[0])
			return struct{}{}
		}
		pipe := r.c.Pipeline()
		for _, c := range cmds {
			_ = pipe.Process(ctx, c)
		}
		_, _ = pipe.Exec(ctx) // every command carries its own error
		return struct{}{}
	}
	if _, err := within(r, ctx, send); err != nil {
		for _, i := range idx {
			b.Answer(i, BeginReply{Err: err})
		}
		return fresh, nil
	}
	for j, c := range cmds {
		i := idx[j]
		v, err := c.Bytes()
		switch {
		case errors.Is(err, redis.Nil):
			fresh = append(fresh, i)
		case err != nil && !redis.HasErrorPrefix(err, "WRONGTYPE"):
			b.Answer(i, BeginReply{Err: err})
		case err != nil: // not a string: the script answers Corrupt, with its reason
			existing = append(existing, i)
		default:
			if rep, ok := settledReply(v, b.Item(i)); ok {
				b.Answer(i, rep)
			} else {
				existing = append(existing, i)
			}
		}
	}
	return fresh, existing
}

// settledReply is the begin script's answer to a claim of it on the record v,
// when v is a completed or failed record whose fingerprint does not differ from
// the claim's (DUPLICATE with the result or the reason it was dropped; FAILED
// with the last error and the failure's kind); ok is false for any other value,
// which the script must decide. It reads v with Decode, which accepts no value the
// script's own parser refuses, and fills the reply as parseBegin fills the
// script's row.
func settledReply(v []byte, it BeginItem) (rep BeginReply, ok bool) {
	f, err := Decode(v)
	if err != nil || (f.State != StateCompleted && f.State != StateFailed) {
		return BeginReply{}, false
	}
	if f.Flags&FlagFP != 0 && it.Fingerprint != nil && f.Fingerprint != *it.Fingerprint {
		return BeginReply{}, false // CONFLICT: the script answers it
	}
	rep = BeginReply{Fence: f.Fence, Attempts: f.Attempts, Created: f.Created.Unix()}
	if f.State == StateCompleted {
		rep.Code = Duplicate
		if f.Flags&FlagDropped != 0 {
			rep.Flag = string(f.Result)
		} else {
			rep.Data = string(f.Result)
		}
		return rep, true
	}
	rep.Code, rep.Flag = Failed, "x"
	if f.Flags&FlagPermanent != 0 {
		rep.Flag = "p"
	}
	if len(f.History) > 0 {
		rep.Data = f.History[0].Message
	}
	return rep, true
}
