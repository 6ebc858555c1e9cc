package consumer

import "context"

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
// see CompletionLookup. Default none.
func WithCompletions(l CompletionLookup) Option {
	return optFunc(func(s *Settings) { s.Completions = l })
}
