package redis

import (
	"context"
	"strings"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/lua"
)

// The operator's side of Store: scans, batched reads and operator transitions,
// for package admin (its Inspector) and package replay (its plan). They work on
// any scope under the store's prefix, not only the store's own.

// recordKeyIn is key's record key in scope ("" for the store's own).
func (r *Store) recordKeyIn(scope string, key consumer.Key) string {
	if scope == "" {
		scope = r.s.Scope
	}
	return r.s.Prefix + ":{" + scope + ":" + string(key) + "}"
}

// checkScope refuses a scope that cannot be part of a record key.
func checkScope(scope string) error {
	if strings.ContainsAny(scope, "{}") {
		return configError("scope %q contains '{' or '}': no record can be in it", scope)
	}
	return nil
}

// ChangeRecord runs one operator transition (see OperatorOp) as one atomic script.
func (r *Store) ChangeRecord(ctx context.Context, c consumer.OperatorChange) (consumer.OperatorReply, error) {
	if r == nil {
		return consumer.OperatorReply{}, errNilStore
	}
	if err := c.Key.Validate(); err != nil {
		return consumer.OperatorReply{}, err
	}
	if err := checkScope(c.Scope); err != nil {
		return consumer.OperatorReply{}, err
	}
	var op lua.OperatorOp
	switch c.Op {
	case consumer.OpUnstick:
		op = lua.OpUnstick
	case consumer.OpForget:
		op = lua.OpForget
	case consumer.OpRerun:
		op = lua.OpRerun
	default:
		return consumer.OperatorReply{}, configError("operator op %d: use consumer.OpUnstick, consumer.OpForget or OpRerun", c.Op)
	}
	ctx, cancel := r.bound(ctx)
	defer cancel()
	rep, err := r.runner.Operate(ctx, lua.OperateArgs{Key: r.recordKeyIn(c.Scope, c.Key), Op: op,
		Now: time.Now().Unix(), Fence: c.Fence, Retention: r.s.Retention, Note: c.Note})
	if err != nil {
		return consumer.OperatorReply{}, &consumer.StoreError{Op: c.Op.String(), Err: err}
	}
	out := consumer.OperatorReply{Fence: rep.Fence, NewFence: rep.NewFence, LeaseLeft: rep.LeaseLeft}
	if rep.State > 0 && rep.State <= lua.StateForgotten {
		out.State = (&lua.Fields{State: rep.State}).StateName()
	}
	switch rep.Code {
	case lua.OperatorOK:
		out.Status = consumer.ChangeApplied
	case lua.OperatorNotFound:
		out.Status = consumer.ChangeNotFound
	case lua.OperatorWrongState:
		out.Status = consumer.ChangeWrongState
	case lua.OperatorFenceMoved:
		out.Status = consumer.ChangeFenceMoved
	default:
		return out, &consumer.CorruptRecordError{Key: c.Key, Reason: "key holds a value that is not an idemkit record"}
	}
	return out, nil
}

// PeekRecords reads the records of keys in scope ("" for the store's own) without
// changing them, in one round trip of plain reads (no script runs). Each answer's
// Now is this process's clock.
func (r *Store) PeekRecords(ctx context.Context, scope string, keys []consumer.Key) ([]consumer.AdminRecord, error) {
	if r == nil {
		return nil, errNilStore
	}
	if err := checkScope(scope); err != nil {
		return nil, err
	}
	if scope == "" {
		scope = r.s.Scope
	}
	refs := make([]string, len(keys))
	for i, k := range keys {
		if err := k.Validate(); err != nil {
			return nil, err
		}
		refs[i] = r.recordKeyIn(scope, k)
	}
	ctx, cancel := r.bound(ctx)
	defer cancel()
	recs, err := r.runner.PeekMany(ctx, refs)
	if err != nil {
		return nil, &consumer.StoreError{Op: "peek", Err: err}
	}
	out := make([]consumer.AdminRecord, len(keys))
	for i, rec := range recs {
		out[i] = adminRecord(scope, keys[i], rec)
	}
	return out, nil
}

// ScanRecords runs one step of a scan over the records under the store's prefix
// (of one scope, or of all): one SCAN with COUNT on one Redis primary, then one
// pipeline of reads of the keys it returned. On Redis Cluster the scan visits every
// primary in turn; on a Ring every live shard. It never uses KEYS. Like SCAN, a
// complete scan returns every record that existed throughout it at least once, and
// may return one twice. Without a scope, a record's scope is read as the text up to
// the first ':' in its hash tag (scopes with ':' in them are listed split there).
func (r *Store) ScanRecords(ctx context.Context, q consumer.ScanQuery) (consumer.ScanPage, error) {
	if r == nil {
		return consumer.ScanPage{}, errNilStore
	}
	if err := checkScope(q.Scope); err != nil {
		return consumer.ScanPage{}, err
	}
	count := q.Count
	if count <= 0 {
		count = consumer.DefaultScanCount
	}
	head := r.s.Prefix + ":{"
	match := globEscape(head) + "*"
	if q.Scope != "" {
		head += q.Scope + ":"
		match = globEscape(head) + "*"
	}
	ctx, cancel := r.bound(ctx)
	defer cancel()
	page, err := r.runner.Scan(ctx, q.Cursor, match, count)
	if err != nil {
		return consumer.ScanPage{}, &consumer.StoreError{Op: "scan", Err: err}
	}
	out := consumer.ScanPage{Next: page.Next, Node: page.Node, Records: make([]consumer.AdminRecord, 0, len(page.Records))}
	for _, sr := range page.Records {
		rest, ok := strings.CutPrefix(sr.Key, head)
		if !ok || !strings.HasSuffix(rest, "}") {
			continue // matched the pattern, but not a record key of this prefix
		}
		rest = rest[:len(rest)-1]
		scope := q.Scope
		if scope == "" {
			var found bool
			if scope, rest, found = strings.Cut(rest, ":"); !found {
				continue
			}
		}
		out.Records = append(out.Records, adminRecord(scope, consumer.Key(rest), sr.Record))
	}
	return out, nil
}

// KeyCount is how many keys the store's Redis primaries hold in all (DBSIZE of
// each), records and everything else.
func (r *Store) KeyCount(ctx context.Context) (int64, error) {
	if r == nil {
		return 0, errNilStore
	}
	ctx, cancel := r.bound(ctx)
	defer cancel()
	n, err := r.runner.KeyCount(ctx)
	if err != nil {
		return 0, &consumer.StoreError{Op: "dbsize", Err: err}
	}
	return n, nil
}

// globEscape escapes the characters SCAN's MATCH treats as a pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[]\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// adminRecord turns a record read by package lua into what an operator sees.
func adminRecord(scope string, key consumer.Key, rec lua.Record) consumer.AdminRecord {
	out := consumer.AdminRecord{Scope: scope, Record: consumer.Record{Key: key, Found: rec.Found, Now: rec.Now, TTL: rec.TTL}}
	if !rec.Found {
		return out
	}
	if rec.Corrupt {
		out.Corrupt = rec.Reason
		return out
	}
	out.Record = recordOf(key, rec)
	for _, n := range rec.Notes {
		out.Notes = append(out.Notes, consumer.OperatorNote(n))
	}
	return out
}
