package consumer

import "time"

// OperatorOp names an operator's transition of one record. Package admin runs them
// (with the operator's name and reason); the stores implement them.
type OperatorOp int

// Operator transitions.
const (
	// OpUnstick ends a started claim whose owner is gone: the record becomes retry,
	// the abandoned attempt is not counted and the fence rises by one, so the next
	// delivery claims the key at once and the old owner, if it is alive after all,
	// gets LEASE_LOST at its next renewal, completion, failure or release.
	OpUnstick OperatorOp = iota + 1
	// OpForget removes a record but keeps its fence: the record is left in state
	// forgotten, and the next claim starts afresh (attempt 1, no fingerprint, no
	// error history; the operator notes stay) at a fence above every earlier one.
	OpForget
	// OpRerun lets a completed or failed key run once more: the record becomes retry
	// with no attempt counted, so the next delivery claims it with the whole attempt
	// budget (WithMaxAttempts of the claiming worker). A completed record's result is
	// dropped; its fingerprint is kept.
	OpRerun
)

func (o OperatorOp) String() string {
	switch o {
	case OpUnstick:
		return "unstick"
	case OpForget:
		return "forget"
	case OpRerun:
		return "rerun"
	}
	return "unknown"
}

// OperatorChange asks a store for one operator transition.
type OperatorChange struct {
	Op    OperatorOp
	Scope string // "" for the store's own scope
	Key   Key
	// Note goes first in the record's operator notes ("unstick by alice: worker
	// died"), which every later transition keeps (see AdminRecord.Notes); a note
	// over 1,280 bytes is cut, with a marker.
	Note string
	// Fence, when not 0, is the fence the operator saw: the change is made only if
	// the record still holds it (nothing moved on in between).
	Fence int64
}

// OperatorStatus is what an operator transition found.
type OperatorStatus int

// Operator transition statuses.
const (
	// ChangeApplied: the transition was made.
	ChangeApplied OperatorStatus = iota + 1
	// ChangeNotFound: there is no record at the key.
	ChangeNotFound
	// ChangeWrongState: the record's state does not allow the transition (State says
	// which it is).
	ChangeWrongState
	// ChangeFenceMoved: the record's fence is no longer OperatorChange.Fence.
	ChangeFenceMoved
)

// OperatorReply is a store's answer to an OperatorChange.
type OperatorReply struct {
	Status OperatorStatus
	// State is the record's state before the change: started, completed, failed,
	// retry or forgotten ("" when there is none).
	State string
	// Fence is the record's fence before the change, NewFence after it.
	Fence, NewFence int64
	// LeaseLeft is what a started record's lease had left before the change.
	LeaseLeft time.Duration
}

// ScanQuery asks a store for one step of a scan over its records.
type ScanQuery struct {
	// Scope limits the scan to one scope; "" scans every scope under the store's prefix.
	Scope string
	// Cursor is "" to start, then the previous page's Next.
	Cursor string
	// Count is how many keys one step examines, a hint as SCAN's COUNT is. Default 1000.
	Count int
}

// ScanPage is one step of a scan. A step may hold no records while the scan goes on.
type ScanPage struct {
	Records []AdminRecord
	// Next continues the scan; "" when it is complete.
	Next string
	// Node names where the step ran (a Redis primary's address).
	Node string
}

// AdminRecord is one record as an operator sees it: its scope and snapshot, or why
// the value at its key is not a record.
type AdminRecord struct {
	Scope string
	Record
	// Notes are the notes of the operator transitions made on the record, newest
	// first. The record keeps them through every later transition (claims,
	// takeovers, completions, failures, releases, and a forget's fresh start) for
	// as long as it lives: the newest 8, each at most 1,280 bytes. A record no
	// operator changed has none, and costs nothing for them.
	Notes []OperatorNote
	// Corrupt says why the key holds something that is not an idemkit record ("" when it is one).
	Corrupt string
}

// OperatorNote is one operator transition's note, as a record keeps it.
type OperatorNote struct {
	Time time.Time // when the change was made (the operator's clock, whole seconds)
	Text string    // "<op> by <actor>: <reason>"
}

// DefaultScanCount is ScanQuery.Count's default.
const DefaultScanCount = 1000
