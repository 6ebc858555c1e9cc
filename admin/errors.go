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
)

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
