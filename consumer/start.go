package consumer

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"time"
)

// Claims are not attempts. An engine claims messages ahead of free handlers, so
// that the store works while the handlers do; such a claim is not an attempt, and
// a member that dies holding it charges the key nothing: the next claim takes it
// over with the same attempt number (Claim.Start). The engine counts an attempt
// at the latest when its handler settles (a failure records the attempt, a
// completion ends the key), and, for a claim it took over, before the handler
// starts: a message that kills its worker every time is then charged from its
// second run on, and uses its attempts up instead of being taken over forever.
// A fresh claim's handler is not marked at its start, which would cost a round
// trip per message: a first crash during it is free.

// markStart tells the store that the handler of claim c, which it answered with
// fence, starts now. An error means the handler must not start: the store could
// not be reached (a *StoreError), or the claim is no longer the caller's.
func markStart(ctx context.Context, store Store, s Settings, c Claim, fence int64) error {
	c.Start = true
	rep := beginBounded(ctx, store, s.CallTimeout, []Claim{c}, nil)[0]
	switch {
	case rep.Err != nil:
		return rep.Err
	case !rep.Claimed() || rep.Fence != fence:
		return &LeaseLostError{Key: c.Key, Fence: fence, Reason: "the claim taken over was lost before its handler started"}
	}
	return nil
}

// claimAll sends claims in one bounded Begin call and answers every claim. A
// claim the store did not answer (a timeout, a connection lost) may still have
// been made: it is sent once more with the same owner token, which a store
// answers with that very claim, so a lost reply costs neither a lease's wait nor
// an attempt. Such a claim is answered ACQUIRED even if its first send took a
// record over, so resent says which claims were sent again: the engine marks
// them counted before their handlers start, as it does a takeover. A re-sent
// claim's Lease is the lease it had left when the second call ran, stated from
// the first call's send time (the one the engine keeps leases from). A claim
// answered later than its lease less the margin could not be used, which bounds
// each call. The answers go to out when it has room for them (see beginBounded).
func claimAll(ctx context.Context, store Store, s Settings, claims []Claim, out []ClaimReply) (reps []ClaimReply, resent []bool) {
	bound := min(s.CallTimeout, s.Lease-LeaseMargin(s.Lease))
	first := time.Now()
	reps = beginBounded(ctx, store, bound, claims, out)
	var again []int
	for i := range reps {
		if errors.Is(reps[i].Err, ErrStoreUnavailable) && mayHaveApplied(reps[i].Err) {
			again = append(again, i)
		}
	}
	if len(again) == 0 || ctx.Err() != nil {
		return reps, nil
	}
	retry := make([]Claim, len(again))
	for j, i := range again {
		retry[j] = claims[i]
	}
	second := time.Now()
	resent = make([]bool, len(claims))
	for j, rep := range beginBounded(ctx, store, bound, retry, nil) {
		if rep.Err == nil {
			if rep.Claimed() {
				// The record's lease runs from a call that ran after second was sent.
				rep.Lease += second.Sub(first)
			}
			reps[again[j]], resent[again[j]] = rep, true
		}
	}
	return reps, resent
}

// needsMark reports whether claim i, answered rep, must be marked counted before
// its handler starts: it took a record over, or it was sent again after a lost
// reply (and may have).
func needsMark(rep ClaimReply, resent []bool, i int) bool {
	return rep.Status == StatusTakenOver || resent != nil && resent[i] && rep.Claimed()
}

// mayHaveApplied reports whether a call that failed with err may still have run
// on the store: its reply was lost to a timeout or a broken connection. A refusal
// the store answered (throttled, out of memory, read-only) was not applied.
func mayHaveApplied(err error) bool {
	var oe *net.OpError
	if errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &oe) && oe.Op == "dial" {
		return false // never connected: nothing was sent
	}
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// beginBounded is one Begin call bounded by bound, answering every claim. A store
// that implements StoreInto answers into out when out has room for every claim
// (its elements are zeroed first); otherwise the store's own slice is returned.
func beginBounded(ctx context.Context, store Store, bound time.Duration, claims []Claim, out []ClaimReply) []ClaimReply {
	bctx, cancel := context.WithTimeout(ctx, bound)
	var reps []ClaimReply
	if si, ok := store.(StoreInto); ok && len(claims) > 0 && len(claims) <= cap(out) {
		reps = out[:len(claims)]
		clear(reps)
		si.BeginInto(bctx, claims, reps)
	} else {
		reps = store.Begin(bctx, claims)
	}
	cancel()
	for len(reps) < len(claims) {
		reps = append(reps, ClaimReply{Err: &StoreError{Op: "begin", Err: errors.New("the store answered fewer claims than it was sent")}})
	}
	return reps
}
