package admin

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/store/memory"
	redisstore "github.com/idemkit/idemkit/store/redis"
)

// Store is what the Inspector needs of a store: the operator SPI.
// redisstore.Store, memory.Store, the PostgreSQL store
// (store/postgres) and the DynamoDB store (store/dynamodb) implement it; package
// admintest is its conformance suite, which every implementation runs.
type Store interface {
	// Settings returns the store's options (its scope and retention).
	Settings() consumer.Settings
	// ScanRecords runs one bounded step of a scan over the records.
	ScanRecords(ctx context.Context, q consumer.ScanQuery) (consumer.ScanPage, error)
	// PeekRecords reads records without changing them.
	PeekRecords(ctx context.Context, scope string, keys []consumer.Key) ([]consumer.AdminRecord, error)
	// ChangeRecord runs one operator transition atomically.
	ChangeRecord(ctx context.Context, c consumer.OperatorChange) (consumer.OperatorReply, error)
}

// KeyCounter is implemented by stores that can say how many keys their server
// holds in all (redisstore.Store); Stats reports it when the store has it.
type KeyCounter interface {
	KeyCount(ctx context.Context) (int64, error)
}

var (
	_ Store      = (*redisstore.Store)(nil)
	_ Store      = (*memory.Store)(nil)
	_ KeyCounter = (*redisstore.Store)(nil)
)

// Inspector reads and changes the records of one store. It is safe for
// concurrent use.
type Inspector struct {
	store Store
}

// New returns an Inspector over store.
func New(store Store) (*Inspector, error) {
	if store == nil {
		return nil, invalid("nil store: pass a *redisstore.Store, a *memory.Store or a *postgres.Store")
	}
	if s := store.Settings(); s.Scope == "" {
		return nil, invalid("the store has no settings: make it with its constructor and check the error")
	}
	return &Inspector{store: store}, nil
}

// Settings returns the store's options: its scope (the one Inspect, a Change and
// a bulk action's Filter act in when given none) and its retention. Entry points
// that change records check it with consumer.Settings.CheckScope.
func (in *Inspector) Settings() consumer.Settings { return in.store.Settings() }

// Record is one record as an operator sees it.
type Record struct {
	consumer.AdminRecord
	// Age is how long the record has been in its state (since its last change).
	Age time.Duration
	// LeaseLeft is what a started record's lease has left (0 when it has run out).
	LeaseLeft time.Duration
	// ResultSize is the size of the stored result in bytes (completed records; the
	// size of a result that was too large to keep, when it was dropped for that).
	ResultSize int
}

// Stale reports whether r is a started record whose lease has run out: the next
// delivery takes it over.
func (r Record) Stale() bool { return r.State == "started" && r.LeaseLeft == 0 }

func view(a consumer.AdminRecord) Record {
	r := Record{AdminRecord: a}
	if !a.Found || a.Corrupt != "" {
		return r
	}
	if !a.Updated.IsZero() {
		r.Age = max(a.Now.Sub(a.Updated), 0).Truncate(time.Second)
	}
	if a.State == "started" {
		r.LeaseLeft = max(a.LeaseUntil.Sub(a.Now), 0)
	}
	r.ResultSize = len(a.Result)
	if n, err := strconv.Atoi(a.Dropped); err == nil {
		r.ResultSize = n
	}
	return r
}

// Inspect reads one record in scope ("" for the store's own). It fails with
// ErrNotFound when there is none, and with ErrCorrupt when the key holds something
// else.
func (in *Inspector) Inspect(ctx context.Context, scope string, key consumer.Key) (Record, error) {
	recs, err := in.store.PeekRecords(ctx, scope, []consumer.Key{key})
	if err != nil {
		return Record{}, err
	}
	if len(recs) != 1 {
		return Record{}, fmt.Errorf("admin: the store answered %d records for one key", len(recs))
	}
	r := view(recs[0])
	switch {
	case !r.Found:
		return r, fmt.Errorf("%w %q in scope %q", ErrNotFound, string(key), in.scope(scope))
	case r.Corrupt != "":
		return r, fmt.Errorf("%w at key %q: %s", ErrCorrupt, string(key), r.Corrupt)
	}
	return r, nil
}

func (in *Inspector) scope(s string) string {
	if s == "" {
		return in.store.Settings().Scope
	}
	return s
}

// Change names one operator transition's record, who asks and why.
type Change struct {
	Scope string // "" for the store's own
	Key   consumer.Key
	// Actor is who makes the change (a user name); required, at most 128 bytes.
	Actor string
	// Reason is why; required, at most 1,024 bytes.
	Reason string
	// Fence, when not 0, is the fence the operator saw: the change is made only if
	// the record still holds it, and fails with ErrFenceMoved otherwise.
	Fence int64
}

// Result is what an operator transition did.
type Result struct {
	Op    string // unstick, forget, rerun
	Scope string
	Key   consumer.Key
	// Before is the record's state before the change; After is what it is now.
	Before, After string
	// Fence is the record's fence before the change, NewFence after it.
	Fence, NewFence int64
	// LeaseLeft is what a started record's lease had left when it was unstuck or
	// forgotten: more than 0 means its owner may still have been renewing it.
	LeaseLeft time.Duration
	// Note is what was recorded in the record's operator notes.
	Note string
}

// Unstick ends a started claim whose owner is gone (see the package doc).
func (in *Inspector) Unstick(ctx context.Context, c Change) (Result, error) {
	return in.change(ctx, consumer.OpUnstick, "retry", c)
}

// Forget removes a record but keeps its fence (see the package doc).
func (in *Inspector) Forget(ctx context.Context, c Change) (Result, error) {
	return in.change(ctx, consumer.OpForget, "forgotten", c)
}

// Rerun lets a completed or failed key run once more (see the package doc).
func (in *Inspector) Rerun(ctx context.Context, c Change) (Result, error) {
	return in.change(ctx, consumer.OpRerun, "retry", c)
}

// operatorNote checks who asks for op and why, and returns the note the record
// keeps: "<op> by <actor>: <reason>".
func operatorNote(op consumer.OperatorOp, actor, reason string) (string, error) {
	actor, reason = strings.TrimSpace(actor), strings.TrimSpace(reason)
	switch {
	case actor == "":
		return "", invalid("%s: no actor: say who makes the change", op)
	case len(actor) > 128 || strings.ContainsAny(actor, "\r\n") || !utf8.ValidString(actor):
		return "", invalid("%s: actor %q: give one line of at most 128 bytes of UTF-8", op, actor)
	case reason == "":
		return "", invalid("%s: no reason: say why, it is recorded in the record", op)
	case len(reason) > 1024 || !utf8.ValidString(reason):
		return "", invalid("%s: reason of %d bytes: give at most 1024 bytes of UTF-8", op, len(reason))
	}
	return fmt.Sprintf("%s by %s: %s", op, actor, reason), nil
}

func (in *Inspector) change(ctx context.Context, op consumer.OperatorOp, after string, c Change) (Result, error) {
	note, err := operatorNote(op, c.Actor, c.Reason)
	if err != nil {
		return Result{}, err
	}
	if c.Fence < 0 {
		return Result{}, invalid("%s: fence %d: give 0 (any) or the fence the record holds", op, c.Fence)
	}
	if err := c.Key.Validate(); err != nil {
		return Result{}, err
	}
	rep, err := in.store.ChangeRecord(ctx, consumer.OperatorChange{Op: op, Scope: c.Scope, Key: c.Key, Note: note, Fence: c.Fence})
	if err != nil {
		return Result{}, err
	}
	res := Result{Op: op.String(), Scope: in.scope(c.Scope), Key: c.Key, Before: rep.State, After: rep.State,
		Fence: rep.Fence, NewFence: rep.NewFence, LeaseLeft: rep.LeaseLeft}
	switch rep.Status {
	case consumer.ChangeApplied:
		res.After, res.Note = after, note
		return res, nil
	case consumer.ChangeNotFound:
		return res, fmt.Errorf("%w %q in scope %q", ErrNotFound, string(c.Key), res.Scope)
	case consumer.ChangeWrongState:
		return res, &StateError{Op: op.String(), State: rep.State}
	case consumer.ChangeFenceMoved:
		return res, fmt.Errorf("%w: %s: the record holds fence %d, not %d: inspect it again", ErrFenceMoved, op, rep.Fence, c.Fence)
	}
	return res, fmt.Errorf("admin: %s: the store answered status %d", op, rep.Status)
}
