package lock

import (
	"errors"
	"fmt"
)

// Errors; match them with errors.Is.
var (
	// ErrNotAcquired: another holder has the lock (after every try).
	ErrNotAcquired = errors.New("lock: not acquired: held elsewhere")
	// ErrLost: the lock was lost while the job ran; its context was cancelled.
	ErrLost = errors.New("lock: lost while running")
	// ErrUnreachable: too few nodes answered, in time, for a quorum.
	ErrUnreachable = errors.New("lock: nodes unreachable")
	// ErrConfig: New was given a bad option, or a method bad input; the message
	// says what to fix.
	ErrConfig = errors.New("lock: invalid configuration")
)

// LostError says why a held lock was lost. It matches ErrLost; it is the cause of
// the job's context (context.Cause) and, wrapped with the job's own error, what Do
// returns.
type LostError struct {
	Name   string
	Reason string
	Err    error // the job's error, if any (set by Do)
}

func (e *LostError) Error() string {
	msg := fmt.Sprintf("lock: %q lost while running: %s", e.Name, e.Reason)
	if e.Err != nil {
		msg += " (job: " + e.Err.Error() + ")"
	}
	return msg
}

// Unwrap matches ErrLost and the job's error.
func (e *LostError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrLost}
	}
	return []error{ErrLost, e.Err}
}

// UnreachableError: a lock could not be decided because too few nodes answered.
// It matches ErrUnreachable. An attempt that got no decision within its time
// bound counts as Nodes-Quorum+1 nodes down: the fewest silent nodes that leave
// no quorum.
type UnreachableError struct {
	Name   string
	Down   int // nodes that failed to answer
	Nodes  int
	Quorum int
	Err    error // the nodes' errors
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("lock: %q: %d of %d nodes unreachable, a quorum needs %d: %v", e.Name, e.Down, e.Nodes, e.Quorum, e.Err)
}

// Unwrap matches ErrUnreachable and the nodes' errors.
func (e *UnreachableError) Unwrap() []error { return []error{ErrUnreachable, e.Err} }
