package admin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idemkit/consumer"
)

// Bulk actions: one operator transition made on every record a Filter selects,
// in two steps. Preview walks the listing (List's bounded pages, one after the
// other) and returns a Plan: how many records match, a sample, and each match's
// fence and state as the walk saw them. Execute makes the transition on each
// record of the plan with the fence it was seen at as the precondition, so a
// record that moved on in between (claimed, taken over, settled, renewed,
// changed by another operator) is skipped and reported as moved, never changed
// blindly.

// Bulk defaults.
const (
	// DefaultBulkMax is Bulk.Max's default.
	DefaultBulkMax = 1000
	// DefaultBulkSample is Bulk.Sample's default.
	DefaultBulkSample = 10
)

// Error kinds of failed records, for Filter.ErrorKind.
const (
	// KindPermanent: the handler failed the key for good (consumer.Permanent).
	KindPermanent = "permanent"
	// KindExhausted: the key's attempts ran out.
	KindExhausted = "exhausted"
)

// Filter selects the records a bulk action changes: a record matches when it
// passes every field that is set. Corrupt records never match.
type Filter struct {
	// Scope is the scope to act in; "" for the store's own.
	Scope string
	// States keeps records in these states. Empty keeps every state the action
	// changes (unstick: started; forget: started, completed, failed, retry;
	// rerun: completed, failed), narrowed to started by LeaseRanOut and to failed
	// by ErrorKind. A state the action does not change is refused.
	States []string
	// OlderThan keeps records that have been in their state at least this long; 0 keeps all.
	OlderThan time.Duration
	// OwnerPrefix keeps records whose owner token starts with this (a started
	// record's owner: every claim of one process shares its token's prefix, shown
	// by List and Inspect).
	OwnerPrefix string
	// KeyPrefix keeps records whose key starts with this.
	KeyPrefix string
	// LeaseRanOut keeps started records whose lease has run out (Record.Stale):
	// their owner stopped renewing them.
	LeaseRanOut bool
	// ErrorKind keeps failed records that failed this way: KindPermanent or
	// KindExhausted (any case).
	ErrorKind string
	// ErrorContains keeps records whose last attempt's error (Record.Error)
	// contains this text, case-sensitively.
	ErrorContains string
}

// Bulk is one operator transition to make on every record a Filter selects,
// who asks for it and why.
type Bulk struct {
	// Op is the transition: consumer.OpUnstick, OpForget or OpRerun.
	Op     consumer.OperatorOp
	Filter Filter
	// Actor is who makes the change; Reason is why. Both are required and recorded
	// in each changed record's notes, as for a single change.
	Actor, Reason string
	// Max is the most records the action may change: Execute refuses a plan that
	// counted more (ErrTooMany). Default DefaultBulkMax (1,000); raise it on
	// purpose. The plan holds one small entry per record up to Max.
	Max int
	// Sample is how many of the matching records the plan keeps to show. Default
	// DefaultBulkSample (10).
	Sample int
	// ScanCount is how many keys one scan step examines. Default 1000.
	ScanCount int
}

// Plan is what a bulk action would change, as Preview saw it. Execute runs it.
type Plan struct {
	// Bulk is the action, with its defaults filled in.
	Bulk Bulk
	// Scope is the scope the action acts in.
	Scope string
	// Count is how many records match. It is exact up to Bulk.Max; past it, a
	// record the scan returned twice (as SCAN may while the server resizes its
	// table) may be counted twice.
	Count int
	// Sample is the first Bulk.Sample matching records, in listing order.
	Sample []Record
	// Examined is how many records the walk read.
	Examined int

	targets []target
	made    bool
}

// Target is one record a plan would change, as the preview saw it.
type Target struct {
	Key   consumer.Key
	State string
	Fence int64
}

// Targets returns the records p would change (at most Bulk.Max of them), each
// with the state and fence the preview saw, in listing order. A caller that
// shows a plan and executes it later can compare them with a fresh preview's, so
// nothing is changed that the operator was not shown.
func (p Plan) Targets() []Target {
	out := make([]Target, len(p.targets))
	for i, t := range p.targets {
		out[i] = Target{Key: t.key, State: t.state, Fence: t.fence}
	}
	return out
}

// target is one record of a plan, as the preview saw it.
type target struct {
	key   consumer.Key
	state string
	fence int64
}

// Report is what Execute did, record by record counted.
type Report struct {
	Op    string // unstick, forget, rerun
	Scope string
	// Planned is the plan's count: Applied + Moved + WrongState + NotFound +
	// Unknown + Left.
	Planned int
	// Applied is how many records were changed.
	Applied int
	// Moved is how many records were left alone because they moved on since the
	// preview: another fence, another state, or no longer matching the filter (a
	// renewed lease, say).
	Moved int
	// WrongState is how many records the store refused in the state the preview
	// saw them in.
	WrongState int
	// NotFound is how many records were gone (their retention ran out).
	NotFound int
	// Unknown is 1 when the store did not answer a change: it may or may not have
	// been made (Skipped names the key); Execute stopped there.
	Unknown int
	// Left is how many records were not tried because Execute stopped: its context
	// ended, or the store failed.
	Left int
	// Skipped names every record that was tried and not changed, with why.
	Skipped []Skipped
}

// Skipped is a record a bulk action tried and did not change.
type Skipped struct {
	Key consumer.Key
	// Why is "moved", "wrong state", "not found" or "unknown".
	Why string
	// State and Fence are the record's as the preview saw it; NowState and
	// NowFence as it was found ("" and 0 when gone or unknown).
	State, NowState string
	Fence, NowFence int64
}

// opStates are the states each transition changes.
var opStates = map[consumer.OperatorOp][]string{
	consumer.OpUnstick: {"started"},
	consumer.OpForget:  {"started", "completed", "failed", "retry"},
	consumer.OpRerun:   {"completed", "failed"},
}

// check validates b and fills in its defaults.
func (b *Bulk) check() error {
	can, ok := opStates[b.Op]
	if !ok {
		return invalid("bulk: op %d: use consumer.OpUnstick, OpForget or OpRerun", b.Op)
	}
	if _, err := operatorNote(b.Op, b.Actor, b.Reason); err != nil {
		return err
	}
	switch {
	case b.Max < 0, b.Sample < 0, b.ScanCount < 0:
		return invalid("bulk %s: max %d, sample %d, scan count %d: give 0 (the default) or more", b.Op, b.Max, b.Sample, b.ScanCount)
	case b.Max == 0:
		b.Max = DefaultBulkMax
	}
	if b.Sample == 0 {
		b.Sample = DefaultBulkSample
	}
	return b.Filter.check(b.Op, can)
}

func (f *Filter) check(op consumer.OperatorOp, can []string) error {
	f.ErrorKind = strings.ToLower(strings.TrimSpace(f.ErrorKind))
	switch {
	case f.OlderThan < 0:
		return invalid("bulk %s: older than %v: give 0 or more", op, f.OlderThan)
	case f.ErrorKind != "" && f.ErrorKind != KindPermanent && f.ErrorKind != KindExhausted:
		return invalid("bulk %s: error kind %q: give %s or %s", op, f.ErrorKind, KindPermanent, KindExhausted)
	}
	for _, s := range f.States {
		if !slices.Contains(can, s) {
			return invalid("bulk %s: state %q: %s changes only records in state %s", op, s, op, strings.Join(can, ", "))
		}
	}
	if len(f.States) == 0 {
		f.States = slices.Clone(can)
		if f.LeaseRanOut {
			f.States = slices.DeleteFunc(f.States, func(s string) bool { return s != "started" })
		}
		if f.ErrorKind != "" {
			f.States = slices.DeleteFunc(f.States, func(s string) bool { return s != "failed" })
		}
	}
	switch {
	case len(f.States) == 0:
		return invalid("bulk %s: the lease-ran-out and error-kind filters select no state %s changes: drop one", op, op)
	case f.LeaseRanOut && !slices.Contains(f.States, "started"):
		return invalid("bulk %s: lease ran out keeps started records only: add state started", op)
	case f.ErrorKind != "" && !slices.Contains(f.States, "failed"):
		return invalid("bulk %s: error kind keeps failed records only: add state failed", op)
	}
	return nil
}

// match reports whether r passes every field of f.
func (f *Filter) match(r Record) bool {
	switch {
	// A record at fence 0 cannot be changed on a fence precondition (0 asks for none).
	case !r.Found || r.Corrupt != "" || r.Fence <= 0:
		return false
	case !slices.Contains(f.States, r.State):
		return false
	case f.OlderThan > 0 && r.Age < f.OlderThan:
		return false
	case !strings.HasPrefix(r.Owner, f.OwnerPrefix), !strings.HasPrefix(string(r.Key), f.KeyPrefix):
		return false
	case f.LeaseRanOut && !r.Stale():
		return false
	case f.ErrorKind != "" && (r.State != "failed" || r.Permanent != (f.ErrorKind == KindPermanent)):
		return false
	}
	return strings.Contains(r.Error, f.ErrorContains)
}

// bulkPage is how many records one listing page of a preview holds.
const bulkPage = 1000

// Preview counts (and samples) the records b would change, changing nothing. It
// walks the listing page by page (see List), and keeps each match's fence and
// state, up to b.Max of them, for Execute.
func (in *Inspector) Preview(ctx context.Context, b Bulk) (Plan, error) {
	if err := b.check(); err != nil {
		return Plan{}, err
	}
	p := Plan{Bulk: b, Scope: in.scope(b.Filter.Scope)}
	seen := make(map[consumer.Key]bool)
	q := Query{Scope: p.Scope, States: b.Filter.States, OlderThan: b.Filter.OlderThan, Limit: bulkPage, ScanCount: b.ScanCount}
	for {
		page, err := in.List(ctx, q)
		p.Examined += page.Examined
		if err != nil {
			return p, err
		}
		for _, r := range page.Records {
			if !b.Filter.match(r) || seen[r.Key] {
				continue
			}
			p.Count++
			if len(p.Sample) < b.Sample {
				p.Sample = append(p.Sample, r)
			}
			if len(p.targets) < b.Max {
				seen[r.Key] = true
				p.targets = append(p.targets, target{key: r.Key, state: r.State, fence: r.Fence})
			}
		}
		if page.Next == "" {
			break
		}
		q.Cursor = page.Next
	}
	p.made = true
	return p, nil
}

// peekBatch is how many records Execute reads again in one call.
const peekBatch = 100

// Execute makes p's transition on each record of p, in batches: it reads the
// batch again, leaves alone (as moved) a record whose fence or state differs
// from the preview's or that no longer matches the filter, and changes the rest
// one by one, each with the fence the preview saw as the precondition, recording
// the actor and reason as a single change does. The fence makes each change
// atomic against claims, takeovers and other operators; a lease renewed in the
// moment between the read and the change is not seen (its owner, if alive,
// learns at its next renewal, as after a single unstick).
//
// Execute refuses a plan that counted more than Bulk.Max records (a
// *TooManyError). It stops when ctx ends or the store fails, and returns the
// report so far with the error. A plan may be executed once: a second run finds
// every changed record moved.
func (in *Inspector) Execute(ctx context.Context, p Plan) (Report, error) {
	b := p.Bulk
	rep := Report{Op: b.Op.String(), Scope: p.Scope, Planned: p.Count}
	if !p.made {
		return rep, invalid("bulk: the plan was not made by Preview: preview the action first")
	}
	if p.Count > b.Max {
		return rep, &TooManyError{Op: b.Op.String(), Count: p.Count, Max: b.Max}
	}
	note, err := operatorNote(b.Op, b.Actor, b.Reason)
	if err != nil {
		return rep, err
	}
	for start := 0; start < len(p.targets); start += peekBatch {
		batch := p.targets[start:min(start+peekBatch, len(p.targets))]
		if err := ctx.Err(); err != nil {
			return rep.stop(len(p.targets)-start, err)
		}
		keys := make([]consumer.Key, len(batch))
		for i, t := range batch {
			keys[i] = t.key
		}
		now, err := in.store.PeekRecords(ctx, p.Scope, keys)
		if err == nil && len(now) != len(keys) {
			err = fmt.Errorf("admin: the store answered %d records for %d keys", len(now), len(keys))
		}
		if err != nil {
			return rep.stop(len(p.targets)-start, err)
		}
		for i, t := range batch {
			if err := ctx.Err(); err != nil {
				return rep.stop(len(p.targets)-start-i, err)
			}
			r := view(now[i])
			switch {
			case !r.Found:
				rep.skip(t, "not found", "", 0)
				continue
			case r.Fence != t.fence || r.State != t.state || !b.Filter.match(r):
				rep.skip(t, "moved", r.State, r.Fence)
				continue
			}
			cr, err := in.store.ChangeRecord(ctx, consumer.OperatorChange{Op: b.Op, Scope: p.Scope, Key: t.key, Note: note, Fence: t.fence})
			if err != nil {
				rep.skip(t, "unknown", "", 0)
				return rep.stop(len(p.targets)-start-i-1,
					fmt.Errorf("admin: bulk %s: the change of key %q may or may not have been made (inspect it): %w", b.Op, string(t.key), err))
			}
			switch {
			case cr.Status == consumer.ChangeApplied:
				rep.Applied++
			case cr.Status == consumer.ChangeNotFound:
				rep.skip(t, "not found", "", 0)
			case cr.Status == consumer.ChangeFenceMoved, cr.Status == consumer.ChangeWrongState && cr.State != t.state:
				rep.skip(t, "moved", cr.State, cr.Fence)
			case cr.Status == consumer.ChangeWrongState:
				rep.skip(t, "wrong state", cr.State, cr.Fence)
			default:
				return rep.stop(len(p.targets)-start-i, fmt.Errorf("admin: bulk %s: the store answered status %d for key %q", b.Op, cr.Status, string(t.key)))
			}
		}
	}
	return rep, nil
}

func (rep *Report) skip(t target, why, nowState string, nowFence int64) {
	switch why {
	case "moved":
		rep.Moved++
	case "wrong state":
		rep.WrongState++
	case "not found":
		rep.NotFound++
	case "unknown":
		rep.Unknown++
	}
	rep.Skipped = append(rep.Skipped, Skipped{Key: t.key, Why: why, State: t.state, Fence: t.fence, NowState: nowState, NowFence: nowFence})
}

// stop ends an Execute with left records not tried.
func (rep Report) stop(left int, err error) (Report, error) {
	rep.Left = left
	return rep, fmt.Errorf("admin: bulk %s stopped with %d of %d records done and %d not tried: %w",
		rep.Op, rep.Planned-left, rep.Planned, left, err)
}
