package lua

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
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
	// Start says the claim's handler starts now: the claim is counted (FlagCounted).
	Start bool
	// ReadFirst says the record is probably settled (a request sent again): Begin
	// reads it first (GET) and answers a completed or failed record whose
	// fingerprint matches from the read, without a script; any other record goes
	// to the begin script, and a missing one to the SET NX claim, one round trip
	// later. Ignored with Start (the caller holds the claim it marks).
	ReadFirst bool
}

// BeginReply is the begin script's answer for one record.
type BeginReply struct {
	Code     Code
	Fence    int64
	Attempts int
	// Millis is the lease granted (Acquired, TakenOver; the lease left when the claim
	// found the caller's own owner token) or the lease left to the other owner (InProgress).
	Millis  int64
	Created int64 // when the record was first claimed, unix seconds
	// Fingerprint is the record's (Acquired, TakenOver): a record keeps the first
	// fingerprint a claim brought. HasFP says whether it has one.
	Fingerprint [16]byte
	HasFP       bool
	Data        string // result (Duplicate), error text (Failed, Exhausted), reason (Corrupt)
	Flag        string // dropped reason (Duplicate) or failure kind (Failed)
	Err         error  // the call for this record did not complete
}

// BeginBatch is a batch of claims: Begin reads its items and answers each one.
type BeginBatch interface {
	Len() int
	Item(i int) BeginItem
	Answer(i int, rep BeginReply)
}

// Claims is a BeginBatch over slices: the answers go to Replies (len(Items)).
type Claims struct {
	Items   []BeginItem
	Replies []BeginReply
}

// Len is len(c.Items).
func (c Claims) Len() int { return len(c.Items) }

// Item is c.Items[i].
func (c Claims) Item(i int) BeginItem { return c.Items[i] }

// Answer stores rep in c.Replies[i].
func (c Claims) Answer(i int, rep BeginReply) { c.Replies[i] = rep }

// Begin claims the items of b. Fresh keys are claimed by one pipeline of plain
// SET NX PX commands (no script: Redis's cheapest write), each with the started
// record a fresh claim writes; the keys that already exist then go through the
// begin script's state machine, in a second round trip that only batches with
// existing keys pay. Items marked ReadFirst are read first, in a round trip of
// their own (see readFirst): a settled record is answered from the read, any
// other record goes straight to the script, a missing one to the SET NX claim.
func (r *Runner) Begin(ctx context.Context, a BeginArgs, b BeginBatch) {
	n := b.Len()
	size, reads := 0, 0
	for i := 0; i < n; i++ {
		it := b.Item(i)
		if len(it.Owner) > maxOwner {
			err := fmt.Errorf("lua: begin: owner token of %d bytes, over %d", len(it.Owner), maxOwner)
			for i := 0; i < n; i++ {
				b.Answer(i, BeginReply{Err: err})
			}
			return
		}
		size += startedLen(it.Fingerprint != nil, it.Owner)
		if it.ReadFirst && !it.Start {
			reads++
		}
	}
	var existing []int
	if reads == 0 {
		existing = r.claimFresh(ctx, a, b, nil, size)
	} else {
		var fresh []int
		fresh, existing = r.readFirst(ctx, b, reads)
		if len(fresh) > 0 {
			existing = append(existing, r.claimFresh(ctx, a, b, fresh, size)...)
		}
	}
	if len(existing) == 0 {
		return
	}
	groups := r.groups(len(existing), func(j int) string { return b.Item(existing[j]).Key })
	calls := make([]call, len(groups))
	for gi, g := range groups {
		for j, e := range g { // group members are positions in existing: make them item indexes
			g[j] = existing[e]
		}
		size := 0
		for _, i := range g {
			it := b.Item(i)
			size += 2 + startedLen(it.Fingerprint != nil, it.Owner)
		}
		blob := make([]byte, 0, size)
		keys := make([]string, len(g))
		for j, i := range g {
			it := b.Item(i)
			keys[j] = it.Key
			blob = binary.BigEndian.AppendUint16(blob, uint16(startedLen(it.Fingerprint != nil, it.Owner)))
			blob = AppendStarted(blob, it.Owner, it.Fingerprint, it.Locked, it.Start, a.Retention, a.Now)
		}
		calls[gi] = call{script: BeginScript, keys: keys,
			args: []any{a.Lease.Milliseconds(), a.Retention.Milliseconds(), a.MaxAttempts, a.Now, blob}}
	}
	for gi, rep := range r.exec(ctx, calls) {
		g := groups[gi]
		err := rep.err
		if err == nil {
			err = parseBegin(rep.val, g, a, b)
		}
		if err != nil {
			for _, i := range g {
				b.Answer(i, BeginReply{Err: err})
			}
		}
	}
}

// claimFresh sends SET key record NX PX lease+retention for the items idx names
// (every item when idx is nil), in one pipeline, answers the fresh claims and
// returns the items whose key exists. size bounds the total length of their
// records.
func (r *Runner) claimFresh(ctx context.Context, a BeginArgs, b BeginBatch, idx []int, size int) (existing []int) {
	n := b.Len()
	if idx != nil {
		n = len(idx)
	}
	item := func(j int) int { // the item of the j-th command
		if idx == nil {
			return j
		}
		return idx[j]
	}
	var sb strings.Builder
	sb.Grow(size)
	buf := claimBufs.Get().(*claimBuf)
	buf.grow(n)
	ends := buf.ends[:n]
	fps := buf.fps[:n]
	// The keys and records, passed by pointer: go-redis takes *string, and a
	// pointer goes into an interface without an allocation of its own.
	strs := buf.strs[:2*n]
	rec := buf.rec[:0]
	for j := 0; j < n; j++ { // each item read once: what follows needs its key and fingerprint
		it := b.Item(item(j))
		rec = AppendStarted(rec[:0], it.Owner, it.Fingerprint, it.Locked, it.Start, a.Retention, a.Now)
		sb.Write(rec)
		ends[j] = sb.Len()
		strs[2*j], fps[j] = it.Key, it.Fingerprint
	}
	buf.rec = rec
	records := sb.String()
	var ttl any = (a.Lease + a.Retention).Milliseconds() // boxed once for every command
	args := buf.args[:6*n]
	cmds := buf.cmds[:n]
	start := 0
	for i := 0; i < n; i++ {
		strs[2*i+1] = records[start:ends[i]]
		start = ends[i]
		cmdArgs := args[6*i : 6*i+6 : 6*i+6]
		cmdArgs[0], cmdArgs[1], cmdArgs[2], cmdArgs[3], cmdArgs[4], cmdArgs[5] =
			"set", &strs[2*i], &strs[2*i+1], "nx", "px", ttl
		cmds[i] = redis.NewCmd(ctx, cmdArgs...)
	}
	send := func() struct{} {
		if n == 1 {
			_ = r.c.Process(ctx, cmds[0])
			return struct{}{}
		}
		pipe := r.c.Pipeline()
		for _, c := range cmds {
			_ = pipe.Process(ctx, c)
		}
		_, _ = pipe.Exec(ctx)
		return struct{}{}
	}
	if _, err := within(r, ctx, send); err != nil {
		// The commands may still be on their way: their storage is not reused.
		for j := 0; j < n; j++ {
			b.Answer(item(j), BeginReply{Err: err})
		}
		return nil
	}
	defer buf.put()
	fresh := BeginReply{Code: Acquired, Fence: 1, Attempts: 1, Millis: a.Lease.Milliseconds(), Created: a.Now}
	for j, c := range cmds {
		i := item(j)
		switch err := c.Err(); {
		case err == nil:
			rep := fresh
			if fp := fps[j]; fp != nil {
				rep.Fingerprint, rep.HasFP = *fp, true
			}
			b.Answer(i, rep)
		case errors.Is(err, redis.Nil):
			existing = append(existing, i)
		default:
			b.Answer(i, BeginReply{Err: err})
		}
	}
	return existing
}

// claimBuf is the reusable storage of one claimFresh call: go-redis holds a
// command's arguments until its reply is read, so it goes back to claimBufs once
// the pipeline's replies are in, never while commands may be on their way.
type claimBuf struct {
	rec  []byte
	ends []int
	fps  []*[16]byte // the items' fingerprints
	args []any
	strs []string
	cmds []*redis.Cmd
}

var claimBufs = sync.Pool{New: func() any { return new(claimBuf) }}

// grow makes room for n commands.
func (b *claimBuf) grow(n int) {
	if cap(b.ends) < n {
		b.ends = make([]int, n)
		b.fps = make([]*[16]byte, n)
		b.args = make([]any, 6*n)
		b.strs = make([]string, 2*n)
		b.cmds = make([]*redis.Cmd, n)
	}
}

// put clears what b refers to and gives it back, unless it is too large to keep.
func (b *claimBuf) put() {
	if cap(b.ends) > maxRecordsPerCall*8 {
		return
	}
	clear(b.fps[:cap(b.fps)])
	clear(b.args[:cap(b.args)])
	clear(b.strs[:cap(b.strs)])
	clear(b.cmds[:cap(b.cmds)])
	claimBufs.Put(b)
}

// parseBegin reads the begin script's flat reply: one row per key, whose length
// its code gives (see begin.lua).
func parseBegin(v any, g []int, a BeginArgs, b BeginBatch) error {
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
			rep := BeginReply{Code: Acquired, Fence: 1, Attempts: 1, Millis: a.Lease.Milliseconds(), Created: a.Now}
			if fp := b.Item(i).Fingerprint; fp != nil {
				rep.Fingerprint, rep.HasFP = *fp, true
			}
			b.Answer(i, rep)
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
		rep := BeginReply{Code: Code(code), Fence: vals[0], Attempts: int(vals[1]), Millis: vals[2], Created: vals[3]}
		switch rep.Code {
		case Acquired, TakenOver:
			if fp := text(); len(fp) == fpLen {
				copy(rep.Fingerprint[:], fp)
				rep.HasFP = true
			}
		case InProgress, Conflict:
		case Duplicate, Failed:
			rep.Data, rep.Flag = text(), text()
		case Exhausted, Corrupt:
			rep.Data = text()
		default:
			return fmt.Errorf("lua: begin: unknown code %d", code)
		}
		b.Answer(i, rep)
	}
	if pos != len(flat) {
		return fmt.Errorf("lua: begin: %d unread values in the reply", len(flat)-pos)
	}
	return nil
}

// AckReply is the answer of complete, fail, extend or release for one record.
type AckReply struct {
	Ack Ack
	Err error
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
	out := make([]AckReply, len(items))
	r.acks(ctx, calls, groups, func(i int, rep AckReply) { out[i] = rep })
	return out
}

func (r *Runner) acks(ctx context.Context, calls []call, members [][]int, answer func(int, AckReply)) {
	r.answerAcks(calls, members, r.exec(ctx, calls), answer)
}

// answerAcks answers the members of each call from its reply: one code per record.
func (r *Runner) answerAcks(calls []call, members [][]int, reps []reply, answer func(int, AckReply)) {
	for ci, rep := range reps {
		g := members[ci]
		if v, ok := rep.val.(int64); ok && v == 0 && rep.err == nil && calls[ci].script == CompleteScript {
			for _, i := range g { // the complete script's answer when every record is OK
				answer(i, AckReply{Ack: AckOK})
			}
			continue
		}
		rows, err := rowsOf(rep, len(g))
		for j, i := range g {
			if err != nil {
				answer(i, AckReply{Err: err})
				continue
			}
			v, err := asInt(rows[j])
			switch a := Ack(v); {
			case err != nil:
				answer(i, AckReply{Err: fmt.Errorf("lua: %s: %w", calls[ci].script.name, err)})
			case a == AckOK || a == AckLeaseLost || a == AckTerminal || a == AckCorrupt:
				answer(i, AckReply{Ack: a})
			default:
				answer(i, AckReply{Err: fmt.Errorf("lua: %s: unknown code %d", calls[ci].script.name, v)})
			}
		}
	}
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
