package admintest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/consumer"
)

// testPeek: a batched read answers every key in order, found or not, in the
// store's scope or another.
func testPeek(t *testing.T, fx Fixtures) {
	ctx := context.Background()
	s := must(t, fx, "svc")
	run(t, s, "done", "p", nil)
	claimDead(t, s, "running")
	keys := []consumer.Key{"done", "none", "running", "done"}
	recs, err := s.PeekRecords(ctx, "", keys)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(keys) {
		t.Fatalf("peek of %d keys answered %d records", len(keys), len(recs))
	}
	for i, want := range []string{"completed", "", "started", "completed"} {
		r := recs[i]
		if r.Scope != "svc" || r.Key != keys[i] || r.Found != (want != "") || r.State != want || r.Corrupt != "" || r.Now.IsZero() {
			t.Fatalf("peek %d (%s): %+v", i, keys[i], r)
		}
	}
	if r := recs[0]; string(r.Result) != `"done"` || r.Fence != 1 || r.Attempts != 1 || r.Created.IsZero() || r.Updated.IsZero() || r.TTL <= 0 {
		t.Fatalf("peek of a completed record: %+v", r)
	}
	if r := recs[2]; r.Owner != "dead-owner" || !r.Counted || r.Fence != 1 || r.Attempts != 1 || r.LeaseUntil.Before(r.Now.Add(lease/2)) {
		t.Fatalf("peek of a started record: %+v", r)
	}
	recs, err = s.PeekRecords(ctx, "elsewhere", keys[:2])
	if err != nil || len(recs) != 2 || recs[0].Found || recs[1].Found || recs[0].Scope != "elsewhere" || recs[0].Key != "done" {
		t.Fatalf("peek in another scope: %+v, %v", recs, err)
	}
	if recs, err := s.PeekRecords(ctx, "", nil); err != nil || len(recs) != 0 {
		t.Fatalf("peek of no keys: %+v, %v", recs, err)
	}
	if _, err := s.PeekRecords(ctx, "", []consumer.Key{"done", ""}); !errors.Is(err, consumer.ErrInvalidKey) {
		t.Fatalf("peek of an empty key: %v", err)
	}
}

// fill makes n records of each state in s: completed, failed, retry, started.
func fill(t *testing.T, s consumer.Store, n int) map[string][]string {
	t.Helper()
	want := map[string][]string{}
	for i := 0; i < n; i++ {
		for _, st := range []string{"completed", "failed", "retry", "started"} {
			key := consumer.Key(fmt.Sprintf("%s-%03d", st, i))
			switch st {
			case "completed":
				run(t, s, key, "p", nil)
			case "failed":
				run(t, s, key, "p", errPermanent)
			case "retry":
				run(t, s, key, "p", errors.New("later"))
			case "started":
				claimDead(t, s, key)
			}
			want[st] = append(want[st], string(key))
		}
	}
	return want
}

// filled is a store of scope svc-a with 30 records of each state, and when the
// store holds several scopes a sibling of scope svc-b with 5 of each.
func filled(t *testing.T, fx Fixtures) (a Store, want map[string][]string, multi bool) {
	t.Helper()
	a = must(t, fx, "svc-a")
	want = fill(t, a, 30)
	if fx.Sibling == nil {
		return a, want, false
	}
	b, err := fx.Sibling(t, a, consumer.WithScope("svc-b"), consumer.WithLease(lease))
	if err != nil {
		t.Fatalf("sibling store: %v", err)
	}
	fill(t, b, 5)
	return a, want, true
}

// scanAll runs a scan to its end and counts each record it returned (a scan may
// return one twice, as Redis SCAN may), and the steps it took.
func scanAll(t *testing.T, s Store, q consumer.ScanQuery) (seen map[string]int, steps int) {
	t.Helper()
	seen = map[string]int{}
	for {
		p, err := s.ScanRecords(context.Background(), q)
		if err != nil {
			t.Fatalf("scan %+v: %v", q, err)
		}
		steps++
		for _, r := range p.Records {
			if !r.Found || r.Corrupt != "" || r.Key == "" || (q.Scope != "" && r.Scope != q.Scope) {
				t.Fatalf("scan %+v returned %+v", q, r)
			}
			seen[r.Scope+"/"+string(r.Key)]++
		}
		if p.Next == "" {
			return seen, steps
		}
		if p.Next == q.Cursor {
			t.Fatalf("scan %+v did not move on", q)
		}
		q.Cursor = p.Next
		if steps > 10000 {
			t.Fatal("the scan never ended")
		}
	}
}

// testScan: a scan paged by its cursor returns every record once at least, of
// its scope only, in steps the size of its count.
func testScan(t *testing.T, fx Fixtures) {
	s, want, multi := filled(t, fx)
	var all []string
	for _, keys := range want {
		all = append(all, scoped("svc-a", keys)...)
	}
	seen, steps := scanAll(t, s, consumer.ScanQuery{Scope: "svc-a", Count: 10})
	if len(seen) != 120 || steps < 2 {
		t.Fatalf("scan of svc-a: %d records in %d steps, want 120 in more than one", len(seen), steps)
	}
	for _, k := range all {
		if seen[k] == 0 {
			t.Fatalf("scan of svc-a missed %s", k)
		}
	}
	seen, _ = scanAll(t, s, consumer.ScanQuery{Count: 25})
	scopes := map[string]int{}
	for k := range seen {
		scope, _, _ := strings.Cut(k, "/")
		scopes[scope]++
	}
	if wantB := map[bool]int{true: 20}[multi]; scopes["svc-a"] != 120 || scopes["svc-b"] != wantB || len(seen) != 120+wantB {
		t.Fatalf("scan of every scope: %v, want svc-a 120, svc-b %d", scopes, wantB)
	}
	if seen, _ := scanAll(t, s, consumer.ScanQuery{Scope: "svc-c"}); len(seen) != 0 {
		t.Fatalf("scan of an empty scope: %v", seen)
	}
	if _, err := s.ScanRecords(context.Background(), consumer.ScanQuery{Scope: "svc-a", Cursor: "not-a-cursor"}); err == nil {
		t.Fatal("a scan took a cursor no scan returned")
	}
}

func listAll(t *testing.T, in *admin.Inspector, q admin.Query) []string {
	t.Helper()
	var keys []string
	for pages := 0; ; pages++ {
		p, err := in.List(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Records) > q.Limit {
			t.Fatalf("page of %d records over the limit %d", len(p.Records), q.Limit)
		}
		for _, r := range p.Records {
			keys = append(keys, r.Scope+"/"+string(r.Key))
		}
		if p.Next == "" {
			break
		}
		q.Cursor = p.Next
		if pages > 10000 {
			t.Fatal("listing never ended")
		}
	}
	sort.Strings(keys)
	return keys
}

func scoped(scope string, keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = scope + "/" + k
	}
	sort.Strings(out)
	return out
}

// testListAndStats: the Inspector's listing by state and age, and its counts,
// over the store's scan.
func testListAndStats(t *testing.T, fx Fixtures) {
	ctx := context.Background()
	a, want, multi := filled(t, fx)
	in := inspector(t, a)
	for _, st := range []string{"completed", "failed", "retry", "started"} {
		got := listAll(t, in, admin.Query{Scope: "svc-a", States: []string{st}, Limit: 7, ScanCount: 10})
		if w := scoped("svc-a", want[st]); fmt.Sprint(got) != fmt.Sprint(w) {
			t.Fatalf("list %s: got %d %v, want %d", st, len(got), got, len(w))
		}
	}
	if got := listAll(t, in, admin.Query{Scope: "svc-a", Limit: 1000}); len(got) != 120 {
		t.Fatalf("list svc-a: %d records, want 120", len(got))
	}
	wantStarted := 30
	if multi {
		wantStarted = 35
	}
	if got := listAll(t, in, admin.Query{States: []string{"started"}, Limit: 11, ScanCount: 25}); len(got) != wantStarted {
		t.Fatalf("list every scope, started: %d records, want %d: %v", len(got), wantStarted, got)
	}
	if got := listAll(t, in, admin.Query{Scope: "svc-a", States: []string{"completed"}, OlderThan: time.Hour, Limit: 5}); len(got) != 0 {
		t.Fatalf("nothing is an hour old, got %v", got)
	}
	st, err := in.Stats(ctx, admin.StatsQuery{Scope: "svc-a", ScanCount: 16})
	if err != nil {
		t.Fatal(err)
	}
	if st.Records != 120 || st.Counts["completed"] != 30 || st.Counts["failed"] != 30 || st.Counts["retry"] != 30 ||
		st.Counts["started"] != 30 || st.Sampled || st.OldestStarted == nil || st.Stale != 0 {
		t.Fatalf("stats: %+v", st)
	}
	st, err = in.Stats(ctx, admin.StatsQuery{Scope: "svc-a", MaxRecords: 10, ScanCount: 10})
	if err != nil || !st.Sampled || st.Records < 10 || st.Records >= 120 {
		t.Fatalf("sampled stats: %+v, %v", st, err)
	}
}

// testCorrupt: values at record keys that are not records are listed, counted
// and inspected as corrupt, and no transition changes them.
func testCorrupt(t *testing.T, fx Fixtures) {
	if fx.Plant == nil {
		t.Skip("the store cannot hold a value that is not a record (Fixtures.Plant is nil)")
	}
	ctx := context.Background()
	s := must(t, fx, "svc")
	run(t, s, "good", "p", nil)
	bad := fx.Plant(t, s)
	if len(bad) == 0 {
		t.Fatal("Fixtures.Plant planted nothing")
	}
	in := inspector(t, s)
	st, err := in.Stats(ctx, admin.StatsQuery{Scope: "svc"})
	if err != nil || st.Counts["completed"] != 1 || st.Counts["corrupt"] != len(bad) || st.Records != 1+len(bad) {
		t.Fatalf("stats: %+v, %v", st, err)
	}
	var want []string
	for _, k := range bad {
		want = append(want, "svc/"+string(k))
		if _, err := in.Inspect(ctx, "", k); !errors.Is(err, admin.ErrCorrupt) {
			t.Fatalf("inspect %s: %v", k, err)
		}
		for _, op := range []consumer.OperatorOp{consumer.OpUnstick, consumer.OpForget, consumer.OpRerun} {
			if _, err := s.ChangeRecord(ctx, consumer.OperatorChange{Op: op, Key: k, Note: "x"}); !errors.Is(err, consumer.ErrCorruptRecord) {
				t.Fatalf("%s of %s: %v", op, k, err)
			}
		}
		if r := peek(t, s, k); r.Corrupt == "" {
			t.Fatalf("peek of %s after the refused changes: %+v", k, r)
		}
	}
	sort.Strings(want)
	if got := listAll(t, in, admin.Query{Scope: "svc", States: []string{"corrupt"}, Limit: 10}); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("list corrupt: %v, want %v", got, want)
	}
}
