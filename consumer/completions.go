package consumer

import (
	"context"
	"errors"
)

// CompletionLookup finds a key's completion where the handler recorded it beside
// its effect, in the effect's own transaction (package store/postgres: InTx). A
// store given one with WithCompletions consults it before it reports a key whose
// attempts are used up (EXHAUSTED, or a duplicate of a key failed that way): a
// completion found there means the effect committed and only its record in the
// store was lost to a crash, so the outcome is DUPLICATE with that result, never a
// dead letter.
type CompletionLookup interface {
	// Completed returns the result recorded for key in scope, and whether one was.
	// An error is a failure to read (the store's outcome is then unchanged).
	Completed(ctx context.Context, scope string, key Key) (result []byte, found bool, err error)
}

// WithCompletions makes l the place where transactional completions are found:
// see CompletionLookup. Completions are stored as JSON, so the store must use the
// JSON codec (the default). Default none.
func WithCompletions(l CompletionLookup) Option {
	return optFunc(func(s *Settings) { s.Completions = l })
}

// opCompletions names a failed completion lookup in its *StoreError.
const opCompletions = "completions"

// lookupFailed reports whether err is a failed completion lookup: it leaves a
// key undecided, and never lets WithFailOpen run a key whose attempts are used up.
func lookupFailed(err error) bool {
	var se *StoreError
	return errors.As(err, &se) && se.Op == opCompletions
}

// completedElsewhere answers a claim that found key's attempts used up (EXHAUSTED,
// or FAILED not permanently) from the store's CompletionLookup, when it has one:
// a completion found there turns the answer into COMPLETED with its result. A
// lookup that fails leaves the key undecided: the answer is a store error, retried
// later and not an attempt, rather than a dead letter for an effect that may have
// committed.
func completedElsewhere(ctx context.Context, s Settings, key Key, rep ClaimReply) ClaimReply {
	if s.Completions == nil || rep.Err != nil ||
		!(rep.Status == StatusExhausted || rep.Status == StatusFailed && !rep.Permanent) {
		return rep
	}
	cctx, cancel := context.WithTimeout(ctx, s.CallTimeout)
	result, found, err := s.Completions.Completed(cctx, s.Scope, key)
	cancel()
	switch {
	case err != nil:
		return ClaimReply{Err: &StoreError{Op: opCompletions, Err: err}}
	case !found:
		return rep
	}
	s.Logger.Info("consumer: attempts used up, but the effect committed with its completion: a duplicate",
		"key", string(key), "scope", s.Scope, "attempts", rep.Attempts)
	return ClaimReply{Status: StatusCompleted, Fence: rep.Fence, Attempts: rep.Attempts, Result: result,
		Created: rep.Created, Ref: rep.Ref}
}
