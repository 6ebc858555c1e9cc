package lua

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"
)

// Code is a begin script's verdict for one record.
type Code int

// Codes returned by the begin script (see begin.lua).
const (
	Acquired   Code = 1 // no record, a retry record, or the caller's own claim: claimed
	TakenOver  Code = 2 // a started record whose lease expired: claimed by the caller
	InProgress Code = 3 // another owner holds a live lease
	Duplicate  Code = 4 // completed: Data holds the encoded result
	Failed     Code = 5 // failed (terminal): Data holds the stored error
	Exhausted  Code = 6 // a retry record at max attempts: now failed
	Conflict   Code = 7 // the stored fingerprint differs from the caller's
	Corrupt    Code = 8 // the key holds something that is not an idemkit record
)

// Ack is the verdict of complete, fail, extend and release for one record.
type Ack int

// Acks returned by complete, fail, extend and release.
const (
	AckOK        Ack = 1 // the caller still owned the claim; the change is made
	AckLeaseLost Ack = 2 // another owner took over, or the claim is gone; nothing changed
	AckTerminal  Ack = 3 // fail only: the record is now failed (permanent or last attempt)
	AckCorrupt   Ack = 8 // the key holds something that is not an idemkit record
)

// BeginArgs are the settings shared by every record of one begin call.
type BeginArgs struct {
	Lease       time.Duration
	Retention   time.Duration
	MaxAttempts int
	Now         int64 // unix seconds, the caller's clock: created/updated times only
}

// BeginItem is one record to claim.
type BeginItem struct {
	Key         string    // full Redis key of the record
	Owner       string    // owner token of the new attempt, at most 255 bytes
	Fingerprint *[16]byte // payload fingerprint; nil when fingerprinting is off
	// Locked says the caller holds the key's distributed lock: the claim is marked
	// as made under the lock, and a started record claimed under the lock is taken
	// over even while its lease is live (its holder lost the lock).
	Locked bool
}

// BeginReply is the begin script's answer for one record.
type BeginReply struct {
	Code     Code
	Fence    int64
	Attempts int
	// Millis is the lease granted (Acquired, TakenOver; the lease left when the claim
	// found the caller's own owner token) or the lease left to the other owner (InProgress).
	Millis  int64
	Created int64  // when the record was first claimed, unix seconds
	Data    string // result (Duplicate), error text (Failed, Exhausted), reason (Corrupt)
	Flag    string // dropped reason (Duplicate) or failure kind (Failed)
	Err     error  // the call for this record did not complete
}

// Begin claims items, in one round trip, writing the answers to out (len(items)).
func (r *Runner) Begin(ctx context.Context, a BeginArgs, items []BeginItem, out []BeginReply) {
	for _, it := range items {
		if len(it.Owner) > maxOwner {
			for i := range out {
				out[i] = BeginReply{Err: fmt.Errorf("lua: begin: owner token of %d bytes, over %d", len(it.Owner), maxOwner)}
			}
			return
		}
	}
	groups := r.groups(len(items), func(i int) string { return items[i].Key })
	calls := make([]call, len(groups))
	for gi, g := range groups {
		size := 0
		for _, i := range g {
			size += 2 + startedLen(items[i].Fingerprint != nil, items[i].Owner)
		}
		blob := make([]byte, 0, size)
		keys := make([]string, len(g))
		for j, i := range g {
			it := items[i]
			keys[j] = it.Key
			blob = binary.BigEndian.AppendUint16(blob, uint16(startedLen(it.Fingerprint != nil, it.Owner)))
			blob = AppendStarted(blob, it.Owner, it.Fingerprint, it.Locked, a.Retention, a.Now)
		}
		calls[gi] = call{script: BeginScript, keys: keys,
			args: []any{a.Lease.Milliseconds(), a.Retention.Milliseconds(), a.MaxAttempts, a.Now, blob}}
	}
	for gi, rep := range r.exec(ctx, calls) {
		g := groups[gi]
		err := rep.err
		if err == nil {
			err = parseBegin(rep.val, g, a, out)
		}
		if err != nil {
			for _, i := range g {
				out[i] = BeginReply{Err: err}
			}
		}
	}
}

// parseBegin reads the begin script's flat reply: one row per key, whose length
// its code gives (see begin.lua).
func parseBegin(v any, g []int, a BeginArgs, out []BeginReply) error {
	flat, ok := v.([]any)
	if !ok {
		return fmt.Errorf("lua: begin: malformed reply %T", v)
	}
	pos := 0
	next := func() (int64, error) {
		if pos >= len(flat) {
			return 0, fmt.Errorf("lua: begin: reply too short for %d keys", len(g))
		}
		pos++
		return asInt(flat[pos-1])
	}
	text := func() string {
		if pos >= len(flat) {
			return ""
		}
		pos++
		s, _ := flat[pos-1].(string)
		return s
	}
	for _, i := range g {
		code, err := next()
		if err != nil {
			return fmt.Errorf("lua: begin: %w", err)
		}
		if code == 0 { // a fresh claim: the caller knows the rest
			out[i] = BeginReply{Code: Acquired, Fence: 1, Attempts: 1, Millis: a.Lease.Milliseconds(), Created: a.Now}
			continue
		}
		var vals [4]int64
		for f := range vals {
			n, err := next()
			if err != nil {
				return fmt.Errorf("lua: begin: %w", err)
			}
			vals[f] = n
		}
		b := BeginReply{Code: Code(code), Fence: vals[0], Attempts: int(vals[1]), Millis: vals[2], Created: vals[3]}
		switch b.Code {
		case Acquired, TakenOver, InProgress, Conflict:
		case Duplicate, Failed:
			b.Data, b.Flag = text(), text()
		case Exhausted, Corrupt:
			b.Data = text()
		default:
			return fmt.Errorf("lua: begin: unknown code %d", code)
		}
		out[i] = b
	}
	if pos != len(flat) {
		return fmt.Errorf("lua: begin: %d unread values in the reply", len(flat)-pos)
	}
	return nil
}

// SettleArgs are the settings shared by one settle call.
type SettleArgs struct {
	MaxAttempts int
	Now         int64 // unix seconds, the caller's clock: updated times only
}

// SettleItem finishes one attempt: Complete stores Result, otherwise the failure is
// recorded (Permanent or retryable, with Message).
type SettleItem struct {
	Key   string
	Owner string
	// Fence, Attempts, Created and Fingerprint are the claim's, as Begin answered:
	// a completion writes the completed record whole.
	Fence       int64
	Attempts    int
	Created     int64
	Fingerprint *[16]byte
	// Late says the caller's lease may have run out: the retention starts afresh.
	Late      bool
	Complete  bool
	Result    []byte
	Dropped   string // "" when Result is kept, else why not: the size, or "unencodable"
	Permanent bool
	Message   string // at most MaxErrorText bytes (see CapError)
}

// AckReply is the answer of complete, fail, extend or release for one record.
type AckReply struct {
	Ack Ack
	Err error
}

// Settle completes or fails items, in one round trip: per hash slot group, one
// complete call and one fail call at most.
func (r *Runner) Settle(ctx context.Context, a SettleArgs, items []SettleItem) []AckReply {
	var calls []call
	var members [][]int
	for _, g := range r.groups(len(items), func(i int) string { return items[i].Key }) {
		var done, failed []int
		for _, i := range g {
			if items[i].Complete {
				done = append(done, i)
			} else {
				failed = append(failed, i)
			}
		}
		if len(done) > 0 {
			calls, members = append(calls, completeCall(a, items, done)), append(members, done)
		}
		if len(failed) > 0 {
			calls, members = append(calls, failCall(a, items, failed)), append(members, failed)
		}
	}
	return r.acks(ctx, calls, members, len(items))
}

func completeCall(a SettleArgs, items []SettleItem, idx []int) call {
	size := 0
	for _, i := range idx {
		it := &items[i]
		size += 10 + len(it.Owner) + headerLen + fpLen + len(it.Result) + len(it.Dropped)
	}
	blob := make([]byte, 0, size)
	keys := make([]string, len(idx))
	for j, i := range idx {
		it := &items[i]
		keys[j] = it.Key
		late := byte('-')
		if it.Late {
			late = 'l'
		}
		blob = append(blob, late)
		blob = binary.BigEndian.AppendUint32(blob, uint32(it.Fence))
		blob = append(blob, byte(len(it.Owner)))
		blob = append(blob, it.Owner...)
		at := len(blob)
		blob = append(blob, 0, 0, 0, 0)
		blob = AppendCompleted(blob, it.Fence, it.Attempts, it.Fingerprint, it.Created, a.Now, it.Result, it.Dropped)
		binary.BigEndian.PutUint32(blob[at:], uint32(len(blob)-at-4))
	}
	return call{script: CompleteScript, keys: keys, args: []any{blob}}
}

func failCall(a SettleArgs, items []SettleItem, idx []int) call {
	size := 0
	for _, i := range idx {
		size += 8 + len(items[i].Owner) + len(items[i].Message)
	}
	blob := make([]byte, 0, size)
	keys := make([]string, len(idx))
	for j, i := range idx {
		it := &items[i]
		keys[j] = it.Key
		msg := CapError(it.Message)
		mode := byte('r')
		if it.Permanent {
			mode = 'p'
		}
		blob = binary.BigEndian.AppendUint32(blob, uint32(it.Fence))
		blob = append(blob, mode, byte(len(it.Owner)))
		blob = append(blob, it.Owner...)
		blob = binary.BigEndian.AppendUint16(blob, uint16(len(msg)))
		blob = append(blob, msg...)
	}
	return call{script: FailScript, keys: keys, args: []any{a.Now, a.MaxAttempts, blob}}
}

// OwnedKey names a record and the attempt that holds it.
type OwnedKey struct {
	Key   string
	Owner string
	Fence int64
}

// Extend renews the leases of items to lease from now (Redis time), in one round trip.
func (r *Runner) Extend(ctx context.Context, lease time.Duration, items []OwnedKey) []AckReply {
	return r.owned(ctx, ExtendScript, items, false, lease.Milliseconds())
}

// Release gives the claims of items back without a result, in one round trip.
func (r *Runner) Release(ctx context.Context, now int64, items []OwnedKey) []AckReply {
	return r.owned(ctx, ReleaseScript, items, true, now)
}

func (r *Runner) owned(ctx context.Context, s *Script, items []OwnedKey, withFence bool, head int64) []AckReply {
	groups := r.groups(len(items), func(i int) string { return items[i].Key })
	calls := make([]call, len(groups))
	for gi, g := range groups {
		blob := make([]byte, 0, len(g)*24)
		keys := make([]string, len(g))
		for j, i := range g {
			keys[j] = items[i].Key
			if withFence {
				blob = binary.BigEndian.AppendUint32(blob, uint32(items[i].Fence))
			}
			blob = append(blob, byte(len(items[i].Owner)))
			blob = append(blob, items[i].Owner...)
		}
		calls[gi] = call{script: s, keys: keys, args: []any{head, blob}}
	}
	return r.acks(ctx, calls, groups, len(items))
}

func (r *Runner) acks(ctx context.Context, calls []call, members [][]int, n int) []AckReply {
	out := make([]AckReply, n)
	for ci, rep := range r.exec(ctx, calls) {
		g := members[ci]
		rows, err := rowsOf(rep, len(g))
		for j, i := range g {
			if err != nil {
				out[i].Err = err
				continue
			}
			v, err := asInt(rows[j])
			switch a := Ack(v); {
			case err != nil:
				out[i].Err = fmt.Errorf("lua: %s: %w", calls[ci].script.name, err)
			case a == AckOK || a == AckLeaseLost || a == AckTerminal || a == AckCorrupt:
				out[i].Ack = a
			default:
				out[i].Err = fmt.Errorf("lua: %s: unknown code %d", calls[ci].script.name, v)
			}
		}
	}
	return out
}

func rowsOf(rep reply, n int) ([]any, error) {
	if rep.err != nil {
		return nil, rep.err
	}
	rows, ok := rep.val.([]any)
	if !ok || len(rows) != n {
		return nil, fmt.Errorf("lua: malformed reply: want %d rows, got %v", n, rep.val)
	}
	return rows, nil
}

func asInt(v any) (int64, error) {
	if n, ok := v.(int64); ok {
		return n, nil
	}
	return 0, fmt.Errorf("want an integer, got %T %v", v, v)
}
