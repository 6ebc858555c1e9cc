package admin

import (
	"errors"
	"fmt"
)

// Sentinel errors of the Inspector. Match them with errors.Is.
var (
	// ErrNotFound: there is no record at the key (in that scope).
	ErrNotFound = errors.New("admin: no record at the key")
	// ErrWrongState: the record's state does not allow the transition; a
	// *StateError says which state it is in.
	ErrWrongState = errors.New("admin: the record's state does not allow this")
	// ErrFenceMoved: the record no longer holds the fence the operator saw.
	ErrFenceMoved = errors.New("admin: the record's fence moved")
	// ErrInvalid: an argument is missing or out of range; the message says what to fix.
	ErrInvalid = errors.New("admin: invalid argument")
	// ErrCorrupt: the key holds something that is not an idemkit record.
	ErrCorrupt = errors.New("admin: not an idemkit record")
	// ErrTooMany: a bulk action matches more records than its Bulk.Max; a
	// *TooManyError says how many.
	ErrTooMany = errors.New("admin: the bulk action matches more records than its maximum")
)

// TooManyError says a bulk action was refused because its preview counted more
// records than Bulk.Max allows. It matches ErrTooMany.
type TooManyError struct {
	Op    string // unstick, forget, rerun
	Count int    // the records the preview counted
	Max   int    // Bulk.Max
}

func (e *TooManyError) Error() string {
	return fmt.Sprintf("admin: bulk %s: %d records match, more than the maximum %d: narrow the filter, or raise the maximum to %d and preview again",
		e.Op, e.Count, e.Max, e.Count)
}

// Unwrap returns ErrTooMany.
func (e *TooManyError) Unwrap() error { return ErrTooMany }

// StateError says which state refused an operator transition. It matches
// ErrWrongState.
type StateError struct {
	Op    string // unstick, forget, rerun
	State string // the record's state
}

func (e *StateError) Error() string {
	hint := ""
	switch {
	case e.Op == "unstick" && e.State != "started":
		hint = ": only a started record can be unstuck"
	case e.Op == "rerun" && e.State == "started":
		hint = ": it is running; unstick it if its owner is gone"
	case e.Op == "rerun" && e.State == "retry":
		hint = ": it runs again at its next delivery already"
	case e.Op == "rerun" && e.State == "forgotten":
		hint = ": it runs afresh at its next delivery already"
	case e.Op == "forget":
		hint = ": it is forgotten already"
	}
	return fmt.Sprintf("admin: %s: the record is %s%s", e.Op, e.State, hint)
}

// Unwrap returns ErrWrongState.
func (e *StateError) Unwrap() error { return ErrWrongState }

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
