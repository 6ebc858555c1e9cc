package memory

import (
	"context"
	"sort"
	"time"

	"github.com/idemkit/idemkit/consumer"
)

// The operator's side of Store, with RedisStore's semantics: scans, batched
// reads and operator transitions. A memory store holds one scope, its own: other
// scopes are empty.

// ChangeRecord runs one operator transition (see OperatorOp), atomically.
func (m *Store) ChangeRecord(ctx context.Context, c consumer.OperatorChange) (consumer.OperatorReply, error) {
	if m == nil {
		return consumer.OperatorReply{}, errNilStore
	}
	if err := c.Key.Validate(); err != nil {
		return consumer.OperatorReply{}, err
	}
	if c.Op < consumer.OpUnstick || c.Op > consumer.OpRerun {
		return consumer.OperatorReply{}, configError("operator op %d: use consumer.OpUnstick, consumer.OpForget or OpRerun", c.Op)
	}
	if err := ctx.Err(); err != nil {
		return consumer.OperatorReply{}, &consumer.StoreError{Op: c.Op.String(), Err: err}
	}
	if c.Scope != "" && c.Scope != m.s.Scope {
		return consumer.OperatorReply{Status: consumer.ChangeNotFound}, nil
	}
	ret := m.s.Retention.Milliseconds()
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.nowMillis()
	r := m.get(c.Key, now)
	if r == nil {
		return consumer.OperatorReply{Status: consumer.ChangeNotFound}, nil
	}
	out := consumer.OperatorReply{State: r.state, Fence: r.fence, NewFence: r.fence}
	if r.state == "started" {
		out.LeaseLeft = time.Duration(max(r.lease-now, 0)) * time.Millisecond
	}
	if c.Fence != 0 && c.Fence != r.fence {
		out.Status = consumer.ChangeFenceMoved
		return out, nil
	}
	switch {
	case c.Op == consumer.OpUnstick && r.state == "started":
		r.state, r.owner, r.locked, r.lease = "retry", "", false, 0
		r.fence++
		r.attempts = max(r.attempts-1, 0)
		r.expires = now + ret
	case c.Op == consumer.OpForget && r.state != "forgotten":
		r.state, r.owner, r.locked, r.lease, r.attempts = "forgotten", "", false, 0, 0
		r.fp, r.result, r.dropped, r.permanent = consumer.Fingerprint{}, nil, "", false
		r.expires = max(r.expires, now+ret)
	case c.Op == consumer.OpRerun && (r.state == "completed" || r.state == "failed"):
		r.state, r.attempts, r.result, r.dropped, r.permanent = "retry", 0, nil, "", false
		r.expires = max(r.expires, now+ret)
	default:
		out.Status, out.LeaseLeft = consumer.ChangeWrongState, 0
		return out, nil
	}
	r.pushNote(now, c.Note)
	r.updated = now
	out.Status, out.NewFence = consumer.ChangeApplied, r.fence
	return out, nil
}

// pushNote puts an operator's note first in r's notes, as the Redis record does.
func (r *memRecord) pushNote(now int64, note string) {
	n := make([]consumer.OperatorNote, 0, min(len(r.notes)+1, consumer.NotesLen))
	n = append(n, consumer.OperatorNote{Time: time.UnixMilli(now).Truncate(time.Second), Text: consumer.CapText(note, consumer.MaxNoteText)})
	r.notes = append(n, r.notes[:min(len(r.notes), consumer.NotesLen-1)]...)
}

// PeekRecords reads the records of keys in scope ("" for the store's own) without
// changing them.
func (m *Store) PeekRecords(ctx context.Context, scope string, keys []consumer.Key) ([]consumer.AdminRecord, error) {
	if m == nil {
		return nil, errNilStore
	}
	if scope == "" {
		scope = m.s.Scope
	}
	out := make([]consumer.AdminRecord, len(keys))
	for i, k := range keys {
		if err := k.Validate(); err != nil {
			return nil, err
		}
		out[i].Scope = scope
		out[i].Key = k
	}
	if err := ctx.Err(); err != nil {
		return nil, &consumer.StoreError{Op: "peek", Err: err}
	}
	if scope != m.s.Scope {
		now := m.clock()
		for i := range out {
			out[i].Now = now
		}
		return out, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.nowMillis()
	for i, k := range keys {
		out[i].Record, out[i].Notes = m.snapshot(k, now)
	}
	return out, nil
}

// ScanRecords runs one step of a scan over the store's records, in key order; the
// cursor is the last key of the previous step.
func (m *Store) ScanRecords(ctx context.Context, q consumer.ScanQuery) (consumer.ScanPage, error) {
	if m == nil {
		return consumer.ScanPage{}, errNilStore
	}
	if err := ctx.Err(); err != nil {
		return consumer.ScanPage{}, &consumer.StoreError{Op: "scan", Err: err}
	}
	if q.Cursor != "" && q.Cursor[0] != '>' {
		return consumer.ScanPage{}, configError("scan cursor %q is not one a scan of this store returned", q.Cursor)
	}
	if q.Scope != "" && q.Scope != m.s.Scope {
		return consumer.ScanPage{Node: "memory"}, nil
	}
	count := q.Count
	if count <= 0 {
		count = consumer.DefaultScanCount
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.nowMillis()
	keys := make([]consumer.Key, 0, len(m.records))
	for k, r := range m.records {
		if r.expires > now && (q.Cursor == "" || string(k) > q.Cursor[1:]) {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	page := consumer.ScanPage{Node: "memory"}
	if len(keys) > count {
		keys = keys[:count]
		page.Next = ">" + string(keys[len(keys)-1])
	}
	for _, k := range keys {
		rec, notes := m.snapshot(k, now)
		page.Records = append(page.Records, consumer.AdminRecord{Scope: m.s.Scope, Record: rec, Notes: notes})
	}
	return page, nil
}

// snapshot is key's record as Peek answers it, and its operator notes; the caller
// holds m.mu.
func (m *Store) snapshot(key consumer.Key, now int64) (consumer.Record, []consumer.OperatorNote) {
	rec := consumer.Record{Key: key, Now: time.UnixMilli(now)}
	r := m.get(key, now)
	if r == nil {
		return rec, nil
	}
	rec.Found, rec.State, rec.Owner, rec.Fence, rec.Attempts = true, r.state, r.owner, r.fence, r.attempts
	rec.Fingerprint, rec.Dropped = r.fp, r.dropped
	if r.state == "completed" && r.dropped == "" {
		rec.Result = append([]byte(nil), r.result...)
	}
	rec.Error, rec.History = r.lastError(), append([]consumer.AttemptError(nil), r.history...)
	rec.Permanent, rec.Locked, rec.Counted = r.state == "failed" && r.permanent, r.locked, r.state == "started" && r.counted
	rec.Created, rec.Updated = created(r.created), created(r.updated)
	rec.TTL = time.Duration(r.expires-now) * time.Millisecond
	if r.state == "started" {
		rec.LeaseUntil = time.UnixMilli(r.lease)
		rec.Retention = m.s.Retention
	}
	return rec, append([]consumer.OperatorNote(nil), r.notes...)
}
