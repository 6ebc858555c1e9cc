package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/consumer"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// operatorStores are the two record tables, each in a schema of the test's own.
var operatorStores = []struct {
	name string
	make func(t *testing.T, opts ...consumer.Option) *Store
}{
	{"plain", func(t *testing.T, opts ...consumer.Option) *Store {
		st, err := NewStore(migrated(t), opts...)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}},
	{"partitioned", func(t *testing.T, opts ...consumer.Option) *Store {
		st, err := NewPartitionedStore(partitioned(t, time.Minute, 10*time.Minute), opts...)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}},
}

func forEachTable(t *testing.T, run func(t *testing.T, mk func(t *testing.T, opts ...consumer.Option) *Store)) {
	for _, s := range operatorStores {
		t.Run(s.name, func(t *testing.T) { run(t, s.make) })
	}
}

func claimOne(t *testing.T, st *Store, c consumer.Claim) consumer.ClaimReply {
	t.Helper()
	rep := st.Begin(context.Background(), []consumer.Claim{c})[0]
	if rep.Err != nil {
		t.Fatalf("claim %s: %v", c.Key, rep.Err)
	}
	return rep
}

func settleOne(t *testing.T, st *Store, s consumer.Settlement) error {
	t.Helper()
	return st.Settle(context.Background(), []consumer.Settlement{s})[0].Err
}

func change(t *testing.T, st *Store, c consumer.OperatorChange) consumer.OperatorReply {
	t.Helper()
	rep, err := st.ChangeRecord(context.Background(), c)
	if err != nil {
		t.Fatalf("%s %s: %v", c.Op, c.Key, err)
	}
	return rep
}

func peekOne(t *testing.T, st *Store, scope string, key consumer.Key) consumer.AdminRecord {
	t.Helper()
	recs, err := st.PeekRecords(context.Background(), scope, []consumer.Key{key})
	if err != nil || len(recs) != 1 {
		t.Fatalf("peek %s: %d records, %v", key, len(recs), err)
	}
	return recs[0]
}

func noteTexts(r consumer.AdminRecord) []string {
	out := make([]string, len(r.Notes))
	for i, n := range r.Notes {
		out[i] = n.Text
	}
	return out
}

var fp1, fp2 = consumer.Fingerprint{1}, consumer.Fingerprint{2}

// Unstick: a started record becomes retry at fence+1 with its attempt not
// counted; the old owner's completion is refused; the next claim runs at once at
// fence+2 as attempt 1; the note survives that claim and its completion.
func TestOperatorUnstick(t *testing.T) {
	forEachTable(t, func(t *testing.T, mk func(*testing.T, ...consumer.Option) *Store) {
		st := mk(t, consumer.WithScope("ops"), consumer.WithLease(time.Hour))
		c := claimOne(t, st, consumer.Claim{Key: "k", Owner: "dead", Fingerprint: fp1, Start: true})
		rep := change(t, st, consumer.OperatorChange{Op: consumer.OpUnstick, Key: "k", Note: "unstick by alice: worker died", Fence: c.Fence})
		if rep.Status != consumer.ChangeApplied || rep.State != "started" || rep.Fence != 1 || rep.NewFence != 2 ||
			rep.LeaseLeft <= 0 || rep.LeaseLeft > time.Hour {
			t.Fatalf("unstick = %+v, want applied, started, fence 1 -> 2, lease left in (0, 1h]", rep)
		}
		r := peekOne(t, st, "", "k")
		if r.State != "retry" || r.Fence != 2 || r.Attempts != 0 || r.Counted || r.Owner != "" || r.Fingerprint != fp1 {
			t.Fatalf("after unstick: %+v, want retry, fence 2, 0 attempts, not counted, no owner, fingerprint kept", r.Record)
		}
		if got := noteTexts(r); len(got) != 1 || got[0] != "unstick by alice: worker died" {
			t.Fatalf("notes = %q", got)
		}
		err := settleOne(t, st, consumer.Settlement{Key: "k", Owner: "dead", Fence: 1, Complete: true, Result: []byte("x")})
		var lost *consumer.LeaseLostError
		if !errors.As(err, &lost) {
			t.Fatalf("the unstuck owner's completion = %v, want LEASE_LOST", err)
		}
		next := claimOne(t, st, consumer.Claim{Key: "k", Owner: "new", Fingerprint: fp1, Start: true})
		if next.Status != consumer.StatusAcquired || next.Fence != 3 || next.Attempts != 1 {
			t.Fatalf("next claim = %+v, want acquired at fence 3, attempt 1", next)
		}
		if err := settleOne(t, st, consumer.Settlement{Key: "k", Owner: "new", Fence: 3, Complete: true, Result: []byte("ok")}); err != nil {
			t.Fatal(err)
		}
		r = peekOne(t, st, "", "k")
		if r.State != "completed" || string(r.Result) != "ok" || len(r.Notes) != 1 || r.Notes[0].Text != "unstick by alice: worker died" {
			t.Fatalf("after completion: %+v notes %q, want completed with the note kept", r.Record, noteTexts(r))
		}
		if d := time.Since(r.Notes[0].Time); d < -time.Second || d > time.Minute {
			t.Fatalf("note time %v, want about now", r.Notes[0].Time)
		}
	})
}

// Forget: any record but a forgotten one becomes forgotten, keeping its fence and
// notes; the next claim starts afresh (attempt 1, a new fingerprint accepted) at
// fence+1; a forgotten record cannot be forgotten again.
func TestOperatorForget(t *testing.T) {
	forEachTable(t, func(t *testing.T, mk func(*testing.T, ...consumer.Option) *Store) {
		st := mk(t, consumer.WithScope("ops"), consumer.WithMaxAttempts(2))
		c := claimOne(t, st, consumer.Claim{Key: "k", Owner: "a", Fingerprint: fp1, Start: true})
		if err := settleOne(t, st, consumer.Settlement{Key: "k", Owner: "a", Fence: c.Fence, Message: "boom"}); err != nil {
			t.Fatal(err)
		}
		c = claimOne(t, st, consumer.Claim{Key: "k", Owner: "b", Fingerprint: fp1, Start: true})
		if err := settleOne(t, st, consumer.Settlement{Key: "k", Owner: "b", Fence: c.Fence, Complete: true, Result: []byte("r")}); err != nil {
			t.Fatal(err)
		}
		rep := change(t, st, consumer.OperatorChange{Op: consumer.OpForget, Key: "k", Note: "forget by bob: bad payload"})
		if rep.Status != consumer.ChangeApplied || rep.State != "completed" || rep.Fence != 2 || rep.NewFence != 2 {
			t.Fatalf("forget = %+v, want applied, completed, fence 2 kept", rep)
		}
		r := peekOne(t, st, "", "k")
		if r.State != "forgotten" || r.Fence != 2 || r.Attempts != 0 || !r.Fingerprint.IsZero() || r.Result != nil || r.Counted {
			t.Fatalf("after forget: %+v, want forgotten at fence 2, no attempts, fingerprint or result", r.Record)
		}
		if again := change(t, st, consumer.OperatorChange{Op: consumer.OpForget, Key: "k", Note: "forget by bob: again"}); again.Status != consumer.ChangeWrongState || again.State != "forgotten" {
			t.Fatalf("second forget = %+v, want WRONG_STATE forgotten", again)
		}
		next := claimOne(t, st, consumer.Claim{Key: "k", Owner: "c", Fingerprint: fp2, Start: true})
		if next.Status != consumer.StatusAcquired || next.Fence != 3 || next.Attempts != 1 || next.Fingerprint != fp2 {
			t.Fatalf("claim after forget = %+v, want acquired afresh at fence 3, attempt 1, the new fingerprint", next)
		}
		r = peekOne(t, st, "", "k")
		if len(r.History) != 0 || r.Fingerprint != fp2 || !r.Counted {
			t.Fatalf("record claimed afresh: %+v, want no error history, the new fingerprint, counted", r.Record)
		}
		if got := noteTexts(r); len(got) != 1 || got[0] != "forget by bob: bad payload" {
			t.Fatalf("notes after the fresh claim = %q, want the forget's", got)
		}
		// a started record can be forgotten too; its owner then loses its claim
		rep = change(t, st, consumer.OperatorChange{Op: consumer.OpForget, Key: "k", Note: "forget by bob: stuck"})
		if rep.Status != consumer.ChangeApplied || rep.State != "started" || rep.LeaseLeft <= 0 {
			t.Fatalf("forget of a started record = %+v, want applied with its lease left", rep)
		}
		var lost *consumer.LeaseLostError
		if err := settleOne(t, st, consumer.Settlement{Key: "k", Owner: "c", Fence: 3, Complete: true}); !errors.As(err, &lost) {
			t.Fatalf("the forgotten claim's completion = %v, want LEASE_LOST", err)
		}
	})
}

// Rerun: a completed or failed record becomes retry with no attempt counted, its
// result dropped and fingerprint kept; the next claim runs with the whole attempt
// budget at fence+1. Started and retry records are refused.
func TestOperatorRerun(t *testing.T) {
	forEachTable(t, func(t *testing.T, mk func(*testing.T, ...consumer.Option) *Store) {
		st := mk(t, consumer.WithScope("ops"), consumer.WithMaxAttempts(2))
		c := claimOne(t, st, consumer.Claim{Key: "done", Owner: "a", Fingerprint: fp1, Start: true})
		if err := settleOne(t, st, consumer.Settlement{Key: "done", Owner: "a", Fence: c.Fence, Complete: true, Result: []byte("r")}); err != nil {
			t.Fatal(err)
		}
		c = claimOne(t, st, consumer.Claim{Key: "bad", Owner: "a", Start: true})
		if err := settleOne(t, st, consumer.Settlement{Key: "bad", Owner: "a", Fence: c.Fence, Message: "no such account", Permanent: true}); err != nil {
			t.Fatal(err)
		}
		for _, key := range []consumer.Key{"done", "bad"} {
			before := peekOne(t, st, "", key)
			rep := change(t, st, consumer.OperatorChange{Op: consumer.OpRerun, Key: key, Note: "rerun by carol: fixed", Fence: 1})
			if rep.Status != consumer.ChangeApplied || rep.State != before.State || rep.Fence != 1 || rep.NewFence != 1 || rep.LeaseLeft != 0 {
				t.Fatalf("rerun %s = %+v, want applied from %s at fence 1", key, rep, before.State)
			}
			r := peekOne(t, st, "", key)
			if r.State != "retry" || r.Attempts != 0 || r.Result != nil || r.Permanent || r.Fingerprint != before.Fingerprint {
				t.Fatalf("after rerun of %s: %+v, want retry, 0 attempts, no result, not permanent, fingerprint kept", key, r.Record)
			}
			if key == "bad" && r.Error != "no such account" {
				t.Fatalf("rerun of a failed record dropped its error history: %+v", r.Record)
			}
			if again := change(t, st, consumer.OperatorChange{Op: consumer.OpRerun, Key: key, Note: "rerun by carol: again"}); again.Status != consumer.ChangeWrongState || again.State != "retry" {
				t.Fatalf("rerun of a retry record = %+v, want WRONG_STATE retry", again)
			}
			next := claimOne(t, st, consumer.Claim{Key: key, Owner: "b", Fingerprint: before.Fingerprint, Start: true})
			if next.Status != consumer.StatusAcquired || next.Fence != 2 || next.Attempts != 1 {
				t.Fatalf("claim after rerun of %s = %+v, want acquired at fence 2, attempt 1", key, next)
			}
			if started := change(t, st, consumer.OperatorChange{Op: consumer.OpRerun, Key: key, Note: "rerun by carol: too soon"}); started.Status != consumer.ChangeWrongState || started.State != "started" {
				t.Fatalf("rerun of a started record = %+v, want WRONG_STATE started", started)
			}
			// the rerun's claim fails once and runs again: the budget is whole
			if err := settleOne(t, st, consumer.Settlement{Key: key, Owner: "b", Fence: 2, Message: "flaky"}); err != nil {
				t.Fatal(err)
			}
			if last := claimOne(t, st, consumer.Claim{Key: key, Owner: "c", Fingerprint: before.Fingerprint, Start: true}); last.Status != consumer.StatusAcquired || last.Attempts != 2 {
				t.Fatalf("second claim after rerun of %s = %+v, want acquired as attempt 2", key, last)
			}
		}
	})
}

// A fence the record no longer holds, a state the op does not apply to and a
// missing key each change nothing and say so.
func TestOperatorRefusals(t *testing.T) {
	forEachTable(t, func(t *testing.T, mk func(*testing.T, ...consumer.Option) *Store) {
		st := mk(t, consumer.WithScope("ops"))
		c := claimOne(t, st, consumer.Claim{Key: "k", Owner: "a", Start: true})
		before := peekOne(t, st, "", "k")
		for _, tc := range []struct {
			c    consumer.OperatorChange
			want consumer.OperatorReply
		}{
			{consumer.OperatorChange{Op: consumer.OpUnstick, Key: "k", Fence: c.Fence + 1},
				consumer.OperatorReply{Status: consumer.ChangeFenceMoved, State: "started", Fence: 1, NewFence: 1}},
			{consumer.OperatorChange{Op: consumer.OpForget, Key: "k", Fence: 7},
				consumer.OperatorReply{Status: consumer.ChangeFenceMoved, State: "started", Fence: 1, NewFence: 1}},
			{consumer.OperatorChange{Op: consumer.OpRerun, Key: "k"},
				consumer.OperatorReply{Status: consumer.ChangeWrongState, State: "started", Fence: 1, NewFence: 1}},
			{consumer.OperatorChange{Op: consumer.OpUnstick, Key: "nothing"},
				consumer.OperatorReply{Status: consumer.ChangeNotFound}},
			{consumer.OperatorChange{Op: consumer.OpUnstick, Scope: "other", Key: "k"},
				consumer.OperatorReply{Status: consumer.ChangeNotFound}},
		} {
			tc.c.Note = "refused"
			got := change(t, st, tc.c)
			got.LeaseLeft = 0
			if got != tc.want {
				t.Errorf("%s %s fence %d in scope %q = %+v, want %+v", tc.c.Op, tc.c.Key, tc.c.Fence, tc.c.Scope, got, tc.want)
			}
		}
		after := peekOne(t, st, "", "k")
		if after.State != before.State || after.Fence != before.Fence || !after.Updated.Equal(before.Updated) || len(after.Notes) != 0 {
			t.Fatalf("refused changes changed the record: %+v notes %q", after.Record, noteTexts(after))
		}
		if _, err := st.ChangeRecord(context.Background(), consumer.OperatorChange{Op: 9, Key: "k"}); err == nil {
			t.Fatal("op 9 was accepted")
		}
	})
}

// A record keeps its newest 8 notes, newest first, each capped, through claims,
// failures and completion.
func TestOperatorNotesKeptNewestFirst(t *testing.T) {
	forEachTable(t, func(t *testing.T, mk func(*testing.T, ...consumer.Option) *Store) {
		st := mk(t, consumer.WithScope("ops"), consumer.WithMaxAttempts(100))
		var fence int64
		for i := range 10 {
			c := claimOne(t, st, consumer.Claim{Key: "k", Owner: fmt.Sprint("o", i), Start: true})
			fence = c.Fence
			rep := change(t, st, consumer.OperatorChange{Op: consumer.OpUnstick, Key: "k", Note: fmt.Sprint("unstick by op: ", i), Fence: fence})
			if rep.Status != consumer.ChangeApplied {
				t.Fatalf("unstick %d = %+v", i, rep)
			}
		}
		long := strings.Repeat("x", 5000)
		c := claimOne(t, st, consumer.Claim{Key: "k", Owner: "last", Start: true})
		if err := settleOne(t, st, consumer.Settlement{Key: "k", Owner: "last", Fence: c.Fence, Complete: true}); err != nil {
			t.Fatal(err)
		}
		change(t, st, consumer.OperatorChange{Op: consumer.OpRerun, Key: "k", Note: long})
		c = claimOne(t, st, consumer.Claim{Key: "k", Owner: "after", Start: true})
		if err := settleOne(t, st, consumer.Settlement{Key: "k", Owner: "after", Fence: c.Fence, Complete: true}); err != nil {
			t.Fatal(err)
		}
		got := noteTexts(peekOne(t, st, "", "k"))
		want := []string{consumer.CapText(long, consumer.MaxNoteText)}
		for i := 9; len(want) < consumer.NotesLen; i-- {
			want = append(want, fmt.Sprint("unstick by op: ", i))
		}
		if len(got) != len(want) || len(got[0]) > consumer.MaxNoteText {
			t.Fatalf("%d notes (first %d bytes), want %d (first at most %d)", len(got), len(got[0]), len(want), consumer.MaxNoteText)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("note %d = %.40q, want %.40q", i, got[i], want[i])
			}
		}
	})
}

// 2,500 records in two scopes, and 100 expired ones, paged 300 at a time: a scan
// of one scope returns exactly its 1,500 or 1,000 keys once each, in key order, a
// scan of all every 2,500, and each page is one index walk (no sort, no offset,
// no sequential scan).
func TestOperatorScanPages(t *testing.T) {
	forEachTable(t, func(t *testing.T, mk func(*testing.T, ...consumer.Option) *Store) {
		ctx := context.Background()
		counts := map[string]int{"alpha": 1500, "beta": 1000}
		var first *Store
		for scope, n := range counts {
			st := mk(t, consumer.WithScope(scope), consumer.WithLease(time.Hour))
			if first != nil { // both scopes in one table
				st.db = first.db
			} else {
				first = st
			}
			for lo := 0; lo < n; lo += 500 {
				claims := make([]consumer.Claim, 0, 500)
				for i := lo; i < min(lo+500, n); i++ {
					claims = append(claims, consumer.Claim{Key: consumer.Key(fmt.Sprintf("%s-%05d", scope, i)), Owner: "w"})
				}
				for _, r := range st.Begin(ctx, claims) {
					if r.Err != nil || r.Status != consumer.StatusAcquired {
						t.Fatalf("seed claim: %+v", r)
					}
				}
			}
		}
		// rows past their expiry are examined, never listed
		if _, err := first.db.Exec(ctx, `INSERT INTO `+first.table+` (key_hash, scope, state, fence, attempts, created_ms,
			updated_ms, expires_ms, written_ms, key)
			SELECT sha256(('x' || i)::bytea), 'alpha', 'retry', 1, 1, 0, 0, 1, (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
				('alpha-expired-' || lpad(i::text, 3, '0'))::bytea FROM generate_series(1, 100) i`); err != nil {
			t.Fatal(err)
		}
		scan := func(scope string) (keys []string, pages int) {
			t.Helper()
			seen := map[string]bool{}
			cursor := ""
			for {
				page, err := first.ScanRecords(ctx, consumer.ScanQuery{Scope: scope, Cursor: cursor, Count: 300})
				if err != nil {
					t.Fatal(err)
				}
				pages++
				if len(page.Records) > 300 {
					t.Fatalf("a page of %d records, asked for 300", len(page.Records))
				}
				for _, r := range page.Records {
					k := r.Scope + "/" + string(r.Key)
					if seen[k] || !r.Found || r.State != "started" || r.Owner != "w" {
						t.Fatalf("scan record %s: seen before %v, %+v", k, seen[k], r.Record)
					}
					if scope != "" && r.Scope != scope {
						t.Fatalf("scope %q scan returned %s", scope, k)
					}
					seen[k] = true
					keys = append(keys, k)
				}
				if cursor = page.Next; cursor == "" {
					return keys, pages
				}
				if pages > 100 {
					t.Fatal("the scan does not end")
				}
			}
		}
		for _, tc := range []struct {
			scope       string
			want, pages int
		}{{"alpha", 1500, 6}, {"beta", 1000, 4}, {"", 2500, 9}} {
			keys, pages := scan(tc.scope)
			if len(keys) != tc.want || pages != tc.pages {
				t.Errorf("scan of scope %q: %d records in %d pages, want %d in %d", tc.scope, len(keys), pages, tc.want, tc.pages)
			}
			for i := 1; i < len(keys); i++ {
				if keys[i-1] >= keys[i] {
					t.Fatalf("scan of scope %q out of order: %s before %s", tc.scope, keys[i-1], keys[i])
				}
			}
		}
		if _, err := first.ScanRecords(ctx, consumer.ScanQuery{Scope: "beta", Cursor: formatCursor("alpha", []byte("alpha-00001"))}); err == nil {
			t.Error("a cursor of another scope was accepted")
		}
		if _, err := first.ScanRecords(ctx, consumer.ScanQuery{Cursor: "17"}); err == nil {
			t.Error("a foreign cursor was accepted")
		}
		// each page reads the scan index from the cursor on, and stops at the limit
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{first.sql.scanScope, []any{"alpha", []byte("alpha-00700"), 300}},
			{first.sql.scanAll, []any{"alpha", []byte("alpha-01400"), 300}},
		} {
			plan := explain(t, first, q.sql, q.args...)
			if !strings.Contains(plan, "Index Scan") || strings.Contains(plan, "Seq Scan") || strings.Contains(plan, "Bitmap") ||
				strings.Contains(plan, "Sort  (") {
				t.Errorf("page plan is not one walk of the scan index:\n%s", plan)
			}
		}
	})
}

// explain is a scan page's plan as the store runs it, with its planner settings.
func explain(t *testing.T, st *Store, sql string, args ...any) string {
	t.Helper()
	ctx := context.Background()
	tx, err := st.db.(*pgxpool.Pool).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	plans := []string{scanPlans}
	if st.partitioned {
		plans = append(plans, partitionedPlans)
	}
	for _, p := range plans {
		if _, err := tx.Exec(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := tx.Query(ctx, "EXPLAIN "+sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// The Inspector over the store: inspect, list and unstick in another scope.
func TestOperatorInspector(t *testing.T) {
	forEachTable(t, func(t *testing.T, mk func(*testing.T, ...consumer.Option) *Store) {
		ctx := context.Background()
		worker := mk(t, consumer.WithScope("payments"), consumer.WithLease(time.Hour))
		for i := range 5 {
			claimOne(t, worker, consumer.Claim{Key: consumer.Key(fmt.Sprint("p-", i)), Owner: "replica-3", Start: true})
		}
		ops, err := NewStore(worker.db, consumer.WithScope("ops"))
		if err != nil {
			t.Fatal(err)
		}
		ops.sql, ops.table, ops.partitioned = worker.sql, worker.table, worker.partitioned
		in, err := admin.New(ops)
		if err != nil {
			t.Fatal(err)
		}
		page, err := in.List(ctx, admin.Query{Scope: "payments", States: []string{"started"}, ScanCount: 2})
		if err != nil || len(page.Records) != 5 || page.Next != "" {
			t.Fatalf("list = %d records, next %q, %v; want 5", len(page.Records), page.Next, err)
		}
		rec, err := in.Inspect(ctx, "payments", "p-3")
		if err != nil || rec.State != "started" || rec.Owner != "replica-3" || rec.LeaseLeft <= 0 {
			t.Fatalf("inspect = %+v, %v", rec, err)
		}
		res, err := in.Unstick(ctx, admin.Change{Scope: "payments", Key: "p-3", Actor: "alice", Reason: "replica-3 is gone", Fence: rec.Fence})
		if err != nil || res.Before != "started" || res.After != "retry" || res.NewFence != rec.Fence+1 {
			t.Fatalf("unstick = %+v, %v", res, err)
		}
		if _, err := in.Unstick(ctx, admin.Change{Scope: "payments", Key: "p-3", Actor: "alice", Reason: "again", Fence: rec.Fence}); !errors.Is(err, admin.ErrFenceMoved) {
			t.Fatalf("unstick at the old fence = %v, want ErrFenceMoved", err)
		}
		if _, err := in.Rerun(ctx, admin.Change{Scope: "payments", Key: "p-3", Actor: "alice", Reason: "why not"}); !errors.Is(err, admin.ErrWrongState) {
			t.Fatalf("rerun of a retry record = %v, want ErrWrongState", err)
		}
		if _, err := in.Forget(ctx, admin.Change{Scope: "payments", Key: "nope", Actor: "alice", Reason: "x"}); !errors.Is(err, admin.ErrNotFound) {
			t.Fatalf("forget of a missing key = %v, want ErrNotFound", err)
		}
		rec, err = in.Inspect(ctx, "payments", "p-3")
		if err != nil || rec.State != "retry" || len(rec.Notes) != 1 || rec.Notes[0].Text != "unstick by alice: replica-3 is gone" {
			t.Fatalf("inspect after unstick = %+v, %v", rec, err)
		}
		page, err = in.List(ctx, admin.Query{Scope: "payments", States: []string{"started"}})
		if err != nil || len(page.Records) != 4 {
			t.Fatalf("list of started after unstick = %d records, %v; want 4", len(page.Records), err)
		}
	})
}

// A row written before the key column (key NULL) is not listed, is read and
// changed by key, and is listed once claimed again.
func TestOperatorScanListsEarlierRowsOnceClaimed(t *testing.T) {
	forEachTable(t, func(t *testing.T, mk func(*testing.T, ...consumer.Option) *Store) {
		ctx := context.Background()
		st := mk(t, consumer.WithScope("old"))
		if _, err := st.db.Exec(ctx, `INSERT INTO `+st.table+` (key_hash, scope, state, fence, attempts, created_ms,
			updated_ms, expires_ms, written_ms)
			SELECT $1, 'old', 'retry', 4, 1, now, now, now + 3600000, now
			FROM (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now) clock`, keyHash("old", "legacy")); err != nil {
			t.Fatal(err)
		}
		listed := func() int {
			page, err := st.ScanRecords(ctx, consumer.ScanQuery{Scope: "old"})
			if err != nil {
				t.Fatal(err)
			}
			return len(page.Records)
		}
		if n := listed(); n != 0 {
			t.Fatalf("a row without its key listed: %d records", n)
		}
		if r := peekOne(t, st, "", "legacy"); r.State != "retry" || r.Fence != 4 {
			t.Fatalf("peek by key = %+v", r.Record)
		}
		if rep := change(t, st, consumer.OperatorChange{Op: consumer.OpForget, Key: "legacy", Note: "forget by x: old"}); rep.Status != consumer.ChangeApplied {
			t.Fatalf("forget by key = %+v", rep)
		}
		if c := claimOne(t, st, consumer.Claim{Key: "legacy", Owner: "w", Start: true}); c.Status != consumer.StatusAcquired || c.Fence != 5 {
			t.Fatalf("claim = %+v, want acquired at fence 5", c)
		}
		if n := listed(); n != 1 {
			t.Fatalf("after its claim, %d records listed, want 1", n)
		}
	})
}

// Owners complete 200 claims while an operator unsticks each at the fence it saw:
// per key exactly one of the two wins (the completion, then the unstick finds it
// completed; or the unstick, then the completion finds its claim gone).
func TestOperatorUnstickRacesCompletion(t *testing.T) {
	forEachTable(t, func(t *testing.T, mk func(*testing.T, ...consumer.Option) *Store) {
		const keys = 200
		ctx := context.Background()
		st := mk(t, consumer.WithScope("race"), consumer.WithLease(time.Hour))
		claims := make([]consumer.Claim, keys)
		for i := range claims {
			claims[i] = consumer.Claim{Key: consumer.Key(fmt.Sprint("k-", i)), Owner: fmt.Sprint("o-", i), Start: true}
		}
		for _, r := range st.Begin(ctx, claims) {
			if r.Err != nil || r.Fence != 1 {
				t.Fatalf("claim: %+v", r)
			}
		}
		var completed, unstuck [keys]bool
		errs := make(chan error, 2*keys)
		var wg sync.WaitGroup
		for i := range keys {
			wg.Add(2)
			go func() {
				defer wg.Done()
				err := st.Settle(ctx, []consumer.Settlement{{Key: claims[i].Key, Owner: claims[i].Owner, Fence: 1, Complete: true}})[0].Err
				var lost *consumer.LeaseLostError
				switch {
				case err == nil:
					completed[i] = true
				case !errors.As(err, &lost):
					errs <- err
				}
			}()
			go func() {
				defer wg.Done()
				rep, err := st.ChangeRecord(ctx, consumer.OperatorChange{Op: consumer.OpUnstick, Key: claims[i].Key, Note: "unstick by op: race", Fence: 1})
				switch {
				case err != nil:
					errs <- err
				case rep.Status == consumer.ChangeApplied:
					unstuck[i] = true
				case rep.Status != consumer.ChangeWrongState || rep.State != "completed":
					errs <- fmt.Errorf("unstick of %s = %+v", claims[i].Key, rep)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		var won int
		for i := range keys {
			if completed[i] == unstuck[i] {
				t.Errorf("key %d: completed %v, unstuck %v; want exactly one", i, completed[i], unstuck[i])
			}
			r := peekOne(t, st, "", claims[i].Key)
			if unstuck[i] && (r.State != "retry" || r.Fence != 2) || completed[i] && (r.State != "completed" || len(r.Notes) != 0) {
				t.Errorf("key %d: %+v after completed %v unstuck %v", i, r.Record, completed[i], unstuck[i])
			}
			if completed[i] {
				won++
			}
		}
		t.Logf("%d of %d completions came first", won, keys)
	})
}
