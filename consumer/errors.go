package consumer

import (
	"context"
	"errors"
	"fmt"
)

// Sentinel errors. Match them with errors.Is: the errors idemkit returns carry more
// detail (a *...Error type) and unwrap to one of these.
var (
	// ErrPayloadConflict: the key was used before with another payload (fingerprints differ).
	ErrPayloadConflict = errors.New("consumer: payload conflict: key reused with a different payload")
	// ErrAttemptsExhausted: the key failed max-attempts times and is now failed for good.
	ErrAttemptsExhausted = errors.New("consumer: attempts exhausted")
	// ErrLeaseLost: this attempt's claim was taken over or could not be renewed; its
	// result was not stored.
	ErrLeaseLost = errors.New("consumer: lease lost")
	// ErrStoreUnavailable: the store could not be reached or answered with an error.
	ErrStoreUnavailable = errors.New("consumer: store unavailable")
	// ErrPermanent: the handler's error is not worth retrying (see Permanent).
	ErrPermanent = errors.New("consumer: permanent error")
	// ErrResultTooLarge: the encoded result was over the size limit and was not kept;
	// the operation is still recorded as done.
	ErrResultTooLarge = errors.New("consumer: result too large")
	// ErrCorruptRecord: the key holds something that is not an idemkit record.
	ErrCorruptRecord = errors.New("consumer: corrupt record")
	// ErrUndecodableResult: the stored result could not be decoded into the result type.
	ErrUndecodableResult = errors.New("consumer: undecodable stored result")
	// ErrInvalidKey: the key is empty or too long.
	ErrInvalidKey = errors.New("consumer: invalid key")
	// ErrNilHandler: no handler was given.
	ErrNilHandler = errors.New("consumer: nil handler")
	// ErrInvalidConfig: an option or argument is out of range; the message says what to fix.
	ErrInvalidConfig = errors.New("consumer: invalid configuration")
	// ErrNotRun: the item's handler was not started (the batch was cancelled, or
	// stopped after an earlier failure); its claim was released and the attempt not
	// counted. Retryable.
	ErrNotRun = errors.New("consumer: not run")
	// ErrInterrupted: the handler started and was cut short by a cancellation it
	// did not make: the caller's context ended (an adapter's shutdown, a Kafka
	// revocation or partition loss) or the pipeline stopped. Its claim was released
	// and the attempt not counted. Retryable.
	ErrInterrupted = errors.New("consumer: interrupted")
	// ErrHandlerPanic: the handler panicked; the panic was recovered and counted as a
	// retryable failure. A panic around the handler (a store wrapper, an observer) is
	// recovered too and matches it: before the handler starts, with ErrNotRun (the
	// claim was released); while settling, as the result of the messages that
	// settlement carried (their claims run out on the store).
	ErrHandlerPanic = errors.New("consumer: handler panicked")
	// ErrAbandoned: the handler gave its claim back with Abandon; nothing was recorded
	// and the attempt was not counted. Retryable.
	ErrAbandoned = errors.New("consumer: abandoned")
	// ErrAlreadyApplied: returned by a handler that found its effect already
	// applied, with the result stored then (see AlreadyApplied).
	ErrAlreadyApplied = errors.New("consumer: already applied")
)

// NotAnAttempt reports whether an Error result's err leaves the key's attempts as
// they were: the handler did not run (ErrNotRun), gave its claim back
// (ErrAbandoned), was cut short by a cancellation the library or the caller made
// (ErrInterrupted, ErrLeaseLost), or the store could not be reached
// (ErrStoreUnavailable). Adapters that count deliveries themselves (a retry
// header) count only the others.
func NotAnAttempt(err error) bool {
	for _, free := range []error{ErrNotRun, ErrAbandoned, ErrInterrupted, ErrLeaseLost, ErrStoreUnavailable} {
		if errors.Is(err, free) {
			return true
		}
	}
	return false
}

// interrupted is the error of a handler cut short by cause, which returned herr.
func interrupted(cause, herr error) error {
	if cause == nil {
		cause = context.Canceled
	}
	return fmt.Errorf("%w: %w (the handler returned: %v)", ErrInterrupted, cause, herr)
}

// AlreadyApplied is what a handler returns, with the result it finds stored, when
// its effect was already applied by an earlier attempt whose completion never
// reached the store: a transactional completion committed in the same database
// transaction as the effect, just before the worker crashed. The value the handler
// returns is stored as the key's result and the outcome is DUPLICATE, as if the
// earlier attempt had completed. Helpers that keep completions beside the effect
// (package store/postgres) return it; handlers rarely need it directly.
func AlreadyApplied() error { return ErrAlreadyApplied }

// AbandonedError is a handler error that gives the claim back: see Abandon.
type AbandonedError struct{ Err error }

// Abandon marks a handler error as "nothing happened, try again later": the claim
// is released instead of recording a failure, so the attempt is not counted and the
// next delivery may claim the key at once. Use it when the handler did not perform
// its side effect for a reason outside the operation (an upstream 5xx, a rate
// limit, a shutdown). The result is an Error matching ErrAbandoned and err, which
// adapters retry. Abandon(nil) is nil.
func Abandon(err error) error {
	if err == nil {
		return nil
	}
	return &AbandonedError{Err: err}
}

func (e *AbandonedError) Error() string   { return "consumer: abandoned: " + e.Err.Error() }
func (e *AbandonedError) Unwrap() []error { return []error{ErrAbandoned, e.Err} }

// PermanentError marks a handler error as not worth retrying. Create it with Permanent.
type PermanentError struct{ Err error }

// Permanent marks err as not worth retrying: the record becomes failed at once and
// later deliveries get DUPLICATE with this error. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

func (e *PermanentError) Error() string   { return e.Err.Error() }
func (e *PermanentError) Unwrap() []error { return []error{ErrPermanent, e.Err} }

// StoreError says which store operation failed and why. It matches ErrStoreUnavailable.
type StoreError struct {
	Op  string // begin, complete, fail, extend, release, peek
	Err error
}

func (e *StoreError) Error() string {
	return "consumer: store unavailable: " + e.Op + ": " + e.Err.Error()
}
func (e *StoreError) Unwrap() []error { return []error{ErrStoreUnavailable, e.Err} }

// CorruptRecordError says what is wrong with the value stored at a key. It matches
// ErrCorruptRecord.
type CorruptRecordError struct {
	Key    Key
	Reason string
}

func (e *CorruptRecordError) Error() string {
	return fmt.Sprintf("consumer: corrupt record at key %q: %s", string(e.Key), e.Reason)
}
func (e *CorruptRecordError) Unwrap() error { return ErrCorruptRecord }

// LeaseLostError says why an attempt lost its claim. It matches ErrLeaseLost, and it
// is the cause (context.Cause) of the handler's context when the lease is lost while
// the handler runs.
type LeaseLostError struct {
	Key    Key
	Fence  int64
	Reason string
}

func (e *LeaseLostError) Error() string {
	return fmt.Sprintf("consumer: lease lost on key %q (fence %d): %s", string(e.Key), e.Fence, e.Reason)
}
func (e *LeaseLostError) Unwrap() error { return ErrLeaseLost }

// ExhaustedError is a failure on the last allowed attempt. It matches
// ErrAttemptsExhausted and, when known, the last handler error.
type ExhaustedError struct {
	Attempts int
	Last     error // the last attempt's error (a *StoredError when read back from the store)
}

func (e *ExhaustedError) Error() string {
	if e.Last == nil {
		return fmt.Sprintf("consumer: attempts exhausted after %d attempts", e.Attempts)
	}
	return fmt.Sprintf("consumer: attempts exhausted after %d attempts: %v", e.Attempts, e.Last)
}
func (e *ExhaustedError) Unwrap() []error {
	if e.Last == nil {
		return []error{ErrAttemptsExhausted}
	}
	return []error{ErrAttemptsExhausted, e.Last}
}

// StoredError is a handler error read back from the store: only its text survives.
// It matches ErrPermanent when the failure was permanent.
type StoredError struct {
	Msg       string
	permanent bool
}

func (e *StoredError) Error() string { return e.Msg }
func (e *StoredError) Unwrap() error {
	if e.permanent {
		return ErrPermanent
	}
	return nil
}

// ResultTooLargeError is a result that was over the size limit and was not kept. It
// matches ErrResultTooLarge.
type ResultTooLargeError struct {
	Size  int // encoded size in bytes
	Limit int // WithMaxResultSize at the time it was stored
}

func (e *ResultTooLargeError) Error() string {
	if e.Limit == 0 {
		return fmt.Sprintf("consumer: result too large: %d bytes were not kept", e.Size)
	}
	return fmt.Sprintf("consumer: result too large: %d bytes over the %d-byte limit were not kept", e.Size, e.Limit)
}
func (e *ResultTooLargeError) Unwrap() error { return ErrResultTooLarge }

// PanicError is a recovered handler panic. It matches ErrHandlerPanic.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("consumer: handler panicked: %v", e.Value) }
func (e *PanicError) Unwrap() error { return ErrHandlerPanic }

func configError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
}
