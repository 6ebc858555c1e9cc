package consumer

import (
	"context"
	"errors"
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
	cctx, cancel := context.WithTimeout(ctx, s.CallTimeout)
	reps := store.Begin(cctx, []Claim{c})
	cancel()
	switch {
	case len(reps) == 0:
		return &StoreError{Op: "begin", Err: errors.New("the store answered no claim")}
	case reps[0].Err != nil:
		return reps[0].Err
	case !reps[0].Claimed() || reps[0].Fence != fence:
		return &LeaseLostError{Key: c.Key, Fence: fence, Reason: "the claim taken over was lost before its handler started"}
	}
	return nil
}
