package consumer

import (
	"errors"
	"time"
)

// Outcome is what an execution came to.
type Outcome int

// Outcomes.
const (
	// Success: the handler ran now and its result is stored.
	Success Outcome = iota + 1
	// Duplicate: the key was already done; Value is the stored result, or Err the
	// stored terminal error.
	Duplicate
	// InProgress: another owner holds a live claim on the key.
	InProgress
	// Error: see Result.Err; Result.Retryable says whether a later delivery may succeed.
	Error
)

func (o Outcome) String() string {
	switch o {
	case Success:
		return "SUCCESS"
	case Duplicate:
		return "DUPLICATE"
	case InProgress:
		return "IN_PROGRESS"
	case Error:
		return "ERROR"
	}
	return "UNKNOWN"
}

// Result is what ExecuteIdempotently and ExecuteBatch return for one key.
type Result[T any] struct {
	Outcome Outcome
	// Value is the handler's result (Success) or the stored result decoded (Duplicate).
	Value T
	// Err says why (Error), or carries the stored terminal error or a result that
	// could not be kept or decoded (Duplicate). Match it with errors.Is against the
	// package's sentinels.
	Err error
	Key Key
	// Attempt and Fence are those of the attempt that ran (Success, Error after a
	// claim) or of the stored record (Duplicate, InProgress).
	Attempt int
	Fence   int64
	// LeaseLeft is how long the other owner's claim has left (InProgress).
	LeaseLeft time.Duration
	// ResultDropped: the result was not kept for duplicates (over the size limit, or
	// it could not be encoded).
	ResultDropped bool
	// Unguarded: the store was unreachable and WithFailOpen ran the handler without a claim.
	Unguarded bool
}

// Retryable reports whether a later delivery of the same message may succeed: true
// for InProgress and for errors other than permanent handler errors, payload
// conflicts, exhausted attempts, corrupt records and invalid input.
func (r Result[T]) Retryable() bool {
	switch r.Outcome {
	case InProgress:
		return true
	case Error:
		return Retryable(r.Err)
	}
	return false
}

// Retryable reports whether an Error outcome's err may go away on a later delivery.
func Retryable(err error) bool {
	for _, final := range []error{ErrPermanent, ErrPayloadConflict, ErrAttemptsExhausted,
		ErrCorruptRecord, ErrInvalidKey, ErrNilHandler, ErrInvalidConfig} {
		if errors.Is(err, final) {
			return false
		}
	}
	return true
}

// Action is what a broker adapter does with a message after its execution. Every
// adapter maps outcomes to actions through ActionFor, never ad hoc.
type Action int

// Actions.
const (
	// Ack: acknowledge or commit the message (Success, Duplicate).
	Ack Action = iota + 1
	// Wait: another run holds the key; wait for it (bounded) or retry later (InProgress).
	Wait
	// Retry: redeliver later with backoff; dead-letter once the adapter's attempts run out.
	Retry
	// DeadLetter: publish to the dead-letter destination (confirmed), then settle.
	DeadLetter
)

func (a Action) String() string {
	switch a {
	case Ack:
		return "ack"
	case Wait:
		return "wait"
	case Retry:
		return "retry"
	case DeadLetter:
		return "dead-letter"
	}
	return "unknown"
}

// ActionFor maps an outcome and its error to the adapter's action.
//
// A Duplicate that carries the stored terminal failure of its key (permanent, or
// attempts exhausted) is dead-lettered again rather than settled: the delivery may
// be the very message whose first dead-letter copy was never confirmed (the broker
// refused it, the worker died), and settling it would lose the only copy.
// Dead-lettering is therefore at least once; dead-letter copies carry the key, so
// their readers can collapse repeats.
func ActionFor(o Outcome, err error) Action {
	switch o {
	case Success:
		return Ack
	case Duplicate:
		if errors.Is(err, ErrPermanent) || errors.Is(err, ErrAttemptsExhausted) {
			return DeadLetter
		}
		return Ack
	case InProgress:
		return Wait
	}
	if Retryable(err) {
		return Retry
	}
	return DeadLetter
}

// Action is ActionFor(r.Outcome, r.Err).
func (r Result[T]) Action() Action { return ActionFor(r.Outcome, r.Err) }
