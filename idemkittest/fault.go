package idemkittest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idemkit/consumer"
)

// Op names a consumer.Store method, for faults.
type Op int

// Store methods a fault can hit.
const (
	OpBegin   Op = iota + 1 // claims
	OpSettle                // completions and failures
	OpExtend                // lease renewals
	OpRelease               // claims given back
	OpPeek                  // reads
)

// String is the method's name in lower case: "begin", "settle", ...
func (o Op) String() string {
	switch o {
	case OpBegin:
		return "begin"
	case OpSettle:
		return "settle"
	case OpExtend:
		return "extend"
	case OpRelease:
		return "release"
	case OpPeek:
		return "peek"
	}
	return "unknown"
}

// FaultAction is what a fault does to the calls it hits.
type FaultAction int

// Fault actions.
const (
	// FailCall: the call never reaches the store; the items it hits are answered
	// with Fault.Err (default: a *consumer.StoreError wrapping ErrInjected, which
	// idemkit treats as a store that refused the call: not applied).
	FailCall FaultAction = iota
	// DelayCall: the call waits Fault.Delay, then goes to the store. A call whose
	// context ends first is answered with a *consumer.StoreError wrapping the
	// context's error, and does not go.
	DelayCall
	// LoseReply: the call reaches the store and is applied; its reply is lost on
	// the way back: the items it hits are answered with Fault.Err (default: a
	// *consumer.StoreError wrapping ErrReplyLost, which idemkit treats as a call
	// that may have been applied, as after a timeout).
	LoseReply
)

// String names the action: "fail", "delay", "lose reply".
func (a FaultAction) String() string {
	switch a {
	case FailCall:
		return "fail"
	case DelayCall:
		return "delay"
	case LoseReply:
		return "lose reply"
	}
	return "unknown"
}

// Forever, as Fault.Count, makes a fault hit every matching call from its Nth on.
const Forever = -1

// Fault is one fault of a FaultStore, modelled on kfake's: which calls it hits
// (Op, Key, Fence), when (Nth, Count) and what it does (Action).
type Fault struct {
	// Op is the store method whose calls the fault hits. Required.
	Op Op
	// Action is what happens to the calls it hits. Default FailCall.
	Action FaultAction
	// Nth is the first matching call the fault hits, counted from when it was
	// injected: 1 is the next one. Default 1.
	Nth int
	// Count is how many matching calls in a row it hits, from the Nth on: Forever
	// for every one. Default 1.
	Count int
	// Key, when set, makes only calls that carry Key match, and the fault hits only
	// Key's items of a batch (the others go to the store untouched). Default: any key.
	Key consumer.Key
	// Fence, when set, makes only the calls of the attempt that holds this fence
	// match (Settle, Extend and Release items carry it; a claim or a read never
	// matches a fault with a fence). Default: any attempt.
	Fence int64
	// Delay is how long DelayCall holds the call back.
	Delay time.Duration
	// Err replaces the default error FailCall and LoseReply answer with.
	Err error
	// Crash says the attempt whose call the fault hits dies with it: the call
	// itself never reaches the store (FailCall), or reaches it and is applied
	// before the process dies (LoseReply), and none of the attempt's later calls
	// reach the store (see FaultStore.Crash). A claim that crashes with
	// FailCall made no attempt, so only its own call is lost.
	Crash bool
}

// ErrInjected is the default cause of a FailCall fault: the store was not reached.
var ErrInjected = errors.New("idemkittest: injected fault: the store was not reached")

// ErrReplyLost is the default cause of a LoseReply fault. It wraps
// context.DeadlineExceeded: to the caller, the call timed out, and may have been
// applied (it was).
var ErrReplyLost = fmt.Errorf("idemkittest: injected fault: the call was applied and its reply lost: %w", context.DeadlineExceeded)

// errCrashed is the reason given, to the library in the test process, for a call
// of a crashed attempt: no store ever sees it, and nothing the kit reports
// depends on the answer.
const errCrashed = "idemkittest: the attempt's worker crashed: its call never reached the store"

func (f Fault) validate() error {
	switch {
	case f.Op < OpBegin || f.Op > OpPeek:
		return fmt.Errorf("idemkittest: fault op %d: use OpBegin, OpSettle, OpExtend, OpRelease or OpPeek", f.Op)
	case f.Action < FailCall || f.Action > LoseReply:
		return fmt.Errorf("idemkittest: fault action %d: use FailCall, DelayCall or LoseReply", f.Action)
	case f.Nth < 0:
		return fmt.Errorf("idemkittest: fault Nth %d: give 1 for the next call (0 means 1)", f.Nth)
	case f.Count < Forever:
		return fmt.Errorf("idemkittest: fault Count %d: give how many calls it hits (0 means 1), or Forever", f.Count)
	case f.Action == DelayCall && f.Delay <= 0:
		return fmt.Errorf("idemkittest: DelayCall with Delay %v: give a positive delay", f.Delay)
	case f.Action == DelayCall && f.Crash:
		return errors.New("idemkittest: DelayCall with Crash: a crash fails the call (FailCall) or loses its reply (LoseReply)")
	case f.Fence < 0:
		return fmt.Errorf("idemkittest: fault fence %d: fences start at 1 (0 means any attempt)", f.Fence)
	}
	return nil
}
