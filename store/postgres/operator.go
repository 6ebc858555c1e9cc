package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/consumer"
	"github.com/jackc/pgx/v5"
)

// The operator's side of the Store, with the Redis store's semantics: scans,
// batched reads and operator transitions, for package admin (its Inspector) and
// the idemkit CLI. They work on any scope in the table, not only the store's own.

var _ admin.Store = (*Store)(nil)

// hashIn is key's row key in scope ("" for the store's own).
func (st *Store) hashIn(scope string, key consumer.Key) []byte {
	if scope == "" {
		scope = st.s.Scope
	}
	return keyHash(scope, key)
}

// ChangeRecord runs one operator transition (see consumer.OperatorOp) as one SQL
// statement (operateSQL): the record's row is locked, the fence precondition and
// the state checked, and the row changed, atomically. The note is kept with the
// record's operator notes (the newest 8) through every later transition.
func (st *Store) ChangeRecord(ctx context.Context, c consumer.OperatorChange) (consumer.OperatorReply, error) {
	if st == nil {
		return consumer.OperatorReply{}, errNil
	}
	if err := c.Key.Validate(); err != nil {
		return consumer.OperatorReply{}, err
	}
	if c.Op < consumer.OpUnstick || c.Op > consumer.OpRerun {
		return consumer.OperatorReply{}, fmt.Errorf("%w: postgres: operator op %d: use consumer.OpUnstick, OpForget or OpRerun", consumer.ErrInvalidConfig, c.Op)
	}
	if c.Fence < 0 {
		return consumer.OperatorReply{}, fmt.Errorf("%w: postgres: %s: fence %d: give 0 (any) or the fence the record holds", consumer.ErrInvalidConfig, c.Op, c.Fence)
	}
	note := storableText(consumer.CapText(c.Note, consumer.MaxNoteText))
	out := consumer.OperatorReply{Status: consumer.ChangeNotFound}
	err := st.query(ctx, c.Op.String(), st.sql.operate, func(rows pgx.Rows) error {
		var d, state string
		var fence, lease, now, newFence int64
		if err := rows.Scan(&d, &state, &fence, &lease, &now, &newFence); err != nil {
			return err
		}
		out = consumer.OperatorReply{State: state, Fence: fence, NewFence: newFence}
		if state == "started" {
			out.LeaseLeft = time.Duration(max(lease-now, 0)) * time.Millisecond
		}
		switch d {
		case "apply":
			out.Status = consumer.ChangeApplied
		case "moved":
			out.Status = consumer.ChangeFenceMoved
		default:
			out.Status, out.LeaseLeft = consumer.ChangeWrongState, 0
		}
		return nil
	}, st.hashIn(c.Scope, c.Key), c.Op.String(), c.Fence, st.s.Retention.Milliseconds(), note, time.Now().Unix(), consumer.NotesLen)
	if err != nil {
		return consumer.OperatorReply{}, err
	}
	return out, nil
}

// PeekRecords reads the records of keys in scope ("" for the store's own) without
// changing them, in one statement. Each answer's Now is the database server's
// clock.
func (st *Store) PeekRecords(ctx context.Context, scope string, keys []consumer.Key) ([]consumer.AdminRecord, error) {
	if st == nil {
		return nil, errNil
	}
	if scope == "" {
		scope = st.s.Scope
	}
	hashes := make([][]byte, len(keys))
	out := make([]consumer.AdminRecord, len(keys))
	for i, k := range keys {
		if err := k.Validate(); err != nil {
			return nil, err
		}
		hashes[i] = keyHash(scope, k)
		out[i] = consumer.AdminRecord{Scope: scope, Record: consumer.Record{Key: k}}
	}
	if len(keys) == 0 {
		return out, nil
	}
	i := 0
	err := st.query(ctx, "peek", st.sql.peekMany, func(rows pgx.Rows) error {
		var r adminRow
		if err := rows.Scan(r.targets()...); err != nil {
			return err
		}
		if i >= len(out) {
			return errors.New("the peek answered more rows than keys")
		}
		out[i] = r.record(scope, keys[i], st.s.Retention)
		i++
		return nil
	}, hashes)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ScanRecords runs one step of a scan over the table's records (of one scope, or
// of all), in scope and key order: one statement that reads at most q.Count rows
// from the scan index, from where the step before ended (the cursor holds its last
// scope and key). Records that have expired are examined but not returned, so a
// step may return fewer than it examined, or none, while the scan goes on. A
// complete scan returns every record that existed throughout it exactly once.
// Records written before migration 007 (which added the key column) are not
// listed until they are claimed again; PeekRecords and ChangeRecord reach them by
// key.
func (st *Store) ScanRecords(ctx context.Context, q consumer.ScanQuery) (consumer.ScanPage, error) {
	if st == nil {
		return consumer.ScanPage{}, errNil
	}
	count := q.Count
	if count <= 0 {
		count = consumer.DefaultScanCount
	}
	var afterScope string
	var afterKey []byte
	if q.Cursor != "" {
		s, k, err := parseCursor(q.Cursor)
		if err != nil {
			return consumer.ScanPage{}, err
		}
		if q.Scope != "" && s != q.Scope {
			return consumer.ScanPage{}, fmt.Errorf("%w: postgres: scan cursor %q is of scope %q, not %q: start again with an empty cursor",
				consumer.ErrInvalidConfig, q.Cursor, s, q.Scope)
		}
		afterScope, afterKey = s, k
	}
	sql, args := st.sql.scanAll, []any{afterScope, afterKey, count}
	if q.Scope != "" {
		sql, args = st.sql.scanScope, []any{q.Scope, afterKey, count}
	}
	if afterKey == nil {
		args[1] = []byte{}
	}
	page := consumer.ScanPage{Node: st.table}
	var n int
	var lastScope string
	var lastKey []byte
	err := st.scan(ctx, sql, func(rows pgx.Rows) error {
		var r adminRow
		var scope string
		var key []byte
		if err := rows.Scan(append([]any{&r.now, &scope, &key}, r.targets()[1:]...)...); err != nil {
			return err
		}
		n, lastScope, lastKey = n+1, scope, key
		if rec := r.record(scope, consumer.Key(key), st.s.Retention); rec.Found {
			page.Records = append(page.Records, rec)
		}
		return nil
	}, args...)
	if err != nil {
		return consumer.ScanPage{}, err
	}
	if n == count {
		page.Next = formatCursor(lastScope, lastKey)
	}
	return page, nil
}

// scanPlans are the planner settings of a scan page: a walk of the scan index in
// its order, from the cursor to the limit. Without them a planner that expects few
// rows past the cursor (a table not analyzed since it grew) may read every row of
// the scope past the cursor and sort them, at every page.
const scanPlans = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
	set_config('enable_sort', 'off', true)`

// scan runs a scan page's statement with scanPlans (and, on the time-partitioned
// table, partitionedPlans), in one round trip.
func (st *Store) scan(ctx context.Context, sql string, each func(pgx.Rows) error, args ...any) error {
	if !st.checked.Load() {
		if err := st.probe(ctx); err != nil {
			return st.fail("scan", err)
		}
	}
	plans := []string{scanPlans}
	if st.partitioned {
		plans = append(plans, partitionedPlans)
	}
	return st.queryTx(ctx, txCall{op: "scan", sql: sql, plans: plans, scan: each, args: args})
}

// A scan cursor is "pg:" and the last scope and key examined, each quoted as a Go
// string: readable, and unambiguous whatever the scope and the key hold.
const cursorPrefix = "pg:"

func formatCursor(scope string, key []byte) string {
	return cursorPrefix + strconv.Quote(scope) + strconv.Quote(string(key))
}

func parseCursor(c string) (string, []byte, error) {
	bad := fmt.Errorf("%w: postgres: scan cursor %q is not one a scan of this store returned: start again with an empty cursor", consumer.ErrInvalidConfig, c)
	rest, ok := strings.CutPrefix(c, cursorPrefix)
	if !ok {
		return "", nil, bad
	}
	qs, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return "", nil, bad
	}
	qk := rest[len(qs):]
	scope, err1 := strconv.Unquote(qs)
	key, err2 := strconv.Unquote(qk)
	if err1 != nil || err2 != nil {
		return "", nil, bad
	}
	return scope, []byte(key), nil
}

// adminRow is a row as recordColumns reads it, after the server's clock; every
// column is NULL when there is no row.
type adminRow struct {
	now                                         int64
	state, owner, dropped                       *string
	fence, lease, createdMs, updatedMs, expires *int64
	attempts                                    *int32
	fp, result                                  []byte
	errs, notes                                 []string
	errAt, noteAt                               []int64
	permanent, locked, counted                  *bool
}

func (r *adminRow) targets() []any {
	return []any{&r.now, &r.state, &r.owner, &r.fence, &r.attempts, &r.fp, &r.lease, &r.result, &r.dropped, &r.errs,
		&r.errAt, &r.permanent, &r.locked, &r.counted, &r.createdMs, &r.updatedMs, &r.expires, &r.notes, &r.noteAt}
}

// record is the row as an operator sees it: not found when there is none or it
// has expired.
func (r *adminRow) record(scope string, key consumer.Key, retention time.Duration) consumer.AdminRecord {
	out := consumer.AdminRecord{Scope: scope, Record: consumer.Record{Key: key, Now: time.UnixMilli(r.now)}}
	if r.state == nil || *r.expires <= r.now {
		return out
	}
	rec := &out.Record
	rec.Found, rec.State, rec.Owner, rec.Fence, rec.Attempts = true, *r.state, *r.owner, *r.fence, int(*r.attempts)
	copy(rec.Fingerprint[:], r.fp)
	rec.Dropped = *r.dropped
	if *r.state == "completed" && *r.dropped == "" {
		rec.Result = r.result
	}
	for j, m := range r.errs {
		e := consumer.AttemptError{Message: m}
		if j < len(r.errAt) {
			e.Time = time.Unix(r.errAt[j], 0)
		}
		rec.History = append(rec.History, e)
	}
	if len(r.errs) > 0 {
		rec.Error = r.errs[0]
	}
	rec.Permanent, rec.Locked = *r.state == "failed" && *r.permanent, *r.locked
	rec.Counted = *r.state == "started" && *r.counted
	rec.Created, rec.Updated = created(*r.createdMs), created(*r.updatedMs)
	rec.TTL = time.Duration(*r.expires-r.now) * time.Millisecond
	if *r.state == "started" {
		rec.LeaseUntil = time.UnixMilli(*r.lease)
		rec.Retention = retention
	}
	for j, text := range r.notes {
		n := consumer.OperatorNote{Text: text}
		if j < len(r.noteAt) {
			n.Time = time.Unix(r.noteAt[j], 0)
		}
		out.Notes = append(out.Notes, n)
	}
	return out
}
