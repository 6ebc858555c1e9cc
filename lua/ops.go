package lua

import (
	"context"
	"fmt"
	"time"
)

// Code is a begin script's verdict for one record.
type Code int

// Codes returned by the begin script (see begin.lua).
const (
	Acquired   Code = 1 // no record, or a retry record: claimed
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
}

// BeginItem is one record to claim.
type BeginItem struct {
	Key         string // full Redis key of the record
	Owner       string // owner token of the new attempt
	Fingerprint string // payload fingerprint, "" when fingerprinting is off
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
	// Millis is the lease granted (Acquired, TakenOver) or the lease left to the
	// other owner (InProgress).
	Millis int64
	Data   string // result (Duplicate), error text (Failed, Exhausted), reason (Corrupt)
	Flag   string // dropped size (Duplicate) or failure kind (Failed)
	Err    error  // the call for this record did not complete
}

// Begin claims items, in one round trip.
func (r *Runner) Begin(ctx context.Context, a BeginArgs, items []BeginItem) []BeginReply {
	keys := make([]string, len(items))
	for i, it := range items {
		keys[i] = it.Key
	}
	groups := r.groups(keys)
	calls := make([]call, len(groups))
	for gi, g := range groups {
		c := call{script: BeginScript, keys: make([]string, len(g)), args: make([]any, 3, 3+3*len(g))}
		c.args[0], c.args[1], c.args[2] = a.Lease.Milliseconds(), a.Retention.Milliseconds(), a.MaxAttempts
		for j, i := range g {
			c.keys[j] = items[i].Key
			locked := "0"
			if items[i].Locked {
				locked = "1"
			}
			c.args = append(c.args, items[i].Owner, items[i].Fingerprint, locked)
		}
		calls[gi] = c
	}
	out := make([]BeginReply, len(items))
	for gi, rep := range r.exec(ctx, calls) {
		g := groups[gi]
		err := rep.err
		if err == nil {
			err = parseBegin(rep.val, g, out)
		}
		if err != nil {
			for _, i := range g {
				out[i] = BeginReply{Err: err}
			}
		}
	}
	return out
}

// parseBegin reads the begin script's flat reply: one row per key, whose length
// its code gives (see begin.lua).
func parseBegin(v any, g []int, out []BeginReply) error {
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
		var vals [4]int64
		for f := range vals {
			n, err := next()
			if err != nil {
				return fmt.Errorf("lua: begin: %w", err)
			}
			vals[f] = n
		}
		b := BeginReply{Code: Code(vals[0]), Fence: vals[1], Attempts: int(vals[2]), Millis: vals[3]}
		switch b.Code {
		case Acquired, TakenOver, InProgress, Conflict:
		case Duplicate, Failed:
			b.Data, b.Flag = text(), text()
		case Exhausted, Corrupt:
			b.Data = text()
		default:
			return fmt.Errorf("lua: begin: unknown code %d", vals[0])
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
	Retention   time.Duration
	MaxAttempts int
}

// SettleItem finishes one attempt: Complete stores Result, otherwise the failure is
// recorded (Permanent or retryable, with Message).
type SettleItem struct {
	Key       string
	Owner     string
	Complete  bool
	Result    []byte
	Dropped   string // "" when Result is kept, else why not: the size, or "unencodable"
	Permanent bool
	Message   string
}

// AckReply is the answer of complete, fail, extend or release for one record.
type AckReply struct {
	Ack Ack
	Err error
}

// Settle completes or fails items, in one round trip: per hash slot group, one
// complete call and one fail call at most.
func (r *Runner) Settle(ctx context.Context, a SettleArgs, items []SettleItem) []AckReply {
	keys := make([]string, len(items))
	for i, it := range items {
		keys[i] = it.Key
	}
	var calls []call
	var members [][]int
	for _, g := range r.groups(keys) {
		var done, failed []int
		for _, i := range g {
			if items[i].Complete {
				done = append(done, i)
			} else {
				failed = append(failed, i)
			}
		}
		if len(done) > 0 {
			c := call{script: CompleteScript, args: make([]any, 1, 1+3*len(done))}
			c.args[0] = a.Retention.Milliseconds()
			for _, i := range done {
				it := items[i]
				c.keys = append(c.keys, it.Key)
				c.args = append(c.args, it.Owner, it.Result, it.Dropped)
			}
			calls, members = append(calls, c), append(members, done)
		}
		if len(failed) > 0 {
			c := call{script: FailScript, args: make([]any, 2, 2+3*len(failed))}
			c.args[0], c.args[1] = a.Retention.Milliseconds(), a.MaxAttempts
			for _, i := range failed {
				it := items[i]
				mode := "r"
				if it.Permanent {
					mode = "p"
				}
				c.keys = append(c.keys, it.Key)
				c.args = append(c.args, it.Owner, mode, it.Message)
			}
			calls, members = append(calls, c), append(members, failed)
		}
	}
	return r.acks(ctx, calls, members, len(items))
}

// OwnedKey names a record and the owner token of the attempt that holds it.
type OwnedKey struct {
	Key   string
	Owner string
}

// Extend renews the leases of items to lease from now (Redis time), in one round trip.
func (r *Runner) Extend(ctx context.Context, lease, retention time.Duration, items []OwnedKey) []AckReply {
	return r.owned(ctx, ExtendScript, []any{lease.Milliseconds(), retention.Milliseconds()}, items)
}

// Release gives the claims of items back without a result, in one round trip.
func (r *Runner) Release(ctx context.Context, retention time.Duration, items []OwnedKey) []AckReply {
	return r.owned(ctx, ReleaseScript, []any{retention.Milliseconds()}, items)
}

func (r *Runner) owned(ctx context.Context, s *Script, head []any, items []OwnedKey) []AckReply {
	keys := make([]string, len(items))
	for i, it := range items {
		keys[i] = it.Key
	}
	groups := r.groups(keys)
	calls := make([]call, len(groups))
	for gi, g := range groups {
		c := call{script: s, args: append(make([]any, 0, len(head)+len(g)), head...)}
		for _, i := range g {
			c.keys = append(c.keys, items[i].Key)
			c.args = append(c.args, items[i].Owner)
		}
		calls[gi] = c
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
