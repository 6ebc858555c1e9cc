package admin_test

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
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/memory"
	redisstore "github.com/idemkit/idemkit/store/redis"
)

// bulkStore is a store the bulk actions run on, as the tests drive it.
type bulkStore interface {
	consumer.Store
	admin.Store
}

// fleet is one scope's records as an operator finds them after replica-7 died:
//
//	dead-00..35   started by replica-7-*, leases run out   (36: what the operator wants)
//	r70-0..4      started by replica-70-*, leases run out  (5: another prefix)
//	live-00..24   started by replica-3-*, leases renewed   (25: a live replica)
//	done-00..39   completed                                (40)
//	bad-00..19    failed for good: "card declined N"      (20)
//	again-00..09  retry: "gateway timeout N"              (10)
type fleet struct {
	store bulkStore // reads, settles and renews with an hour's lease (Redis) or the shared one (memory)
	in    *admin.Inspector
	dead  map[consumer.Key]consumer.ClaimReply
	live  []consumer.Owned
}

const (
	deadCount   = 36
	othersCount = 100
	fleetScope  = "payments"
)

// fleetBackend makes the stores of a fleet: dead claims with a lease that runs
// out at once (Redis: a second store on the same records with the shortest
// lease), and the rest. A memory store is one store with one lease, so its live
// replica renews its claims, as a live replica does.
type fleetBackend struct {
	name string
	make func(t *testing.T) (dead, rest bulkStore, renew bool)
}

func fleetBackends() []fleetBackend {
	return []fleetBackend{
		{"memory", func(t *testing.T) (bulkStore, bulkStore, bool) {
			s, err := memory.NewStore(consumer.WithScope(fleetScope), consumer.WithLease(1500*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			return s, s, true
		}},
		{"redis", func(t *testing.T) (bulkStore, bulkStore, bool) {
			c, prefix := testenv.Redis(t), testenv.Prefix(t)
			mk := func(lease time.Duration) bulkStore {
				s, err := redisstore.NewStore(c, consumer.WithPrefix(prefix), consumer.WithScope(fleetScope), consumer.WithLease(lease))
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			return mk(20 * time.Millisecond), mk(time.Hour), false
		}},
	}
}

func claimAll(t *testing.T, s consumer.Store, keys []consumer.Key, owner func(i int) string) []consumer.ClaimReply {
	t.Helper()
	claims := make([]consumer.Claim, len(keys))
	for i, k := range keys {
		claims[i] = consumer.Claim{Key: k, Owner: owner(i), Fingerprint: consumer.FingerprintOf([]byte(k)), Start: true}
	}
	reps := s.Begin(context.Background(), claims)
	for i, rep := range reps {
		if !rep.Claimed() || rep.Fence != 1 {
			t.Fatalf("claim %s: %+v", keys[i], rep)
		}
	}
	return reps
}

func keys(prefix string, n int) []consumer.Key {
	out := make([]consumer.Key, n)
	for i := range out {
		out[i] = consumer.Key(fmt.Sprintf("%s-%02d", prefix, i))
	}
	return out
}

func newFleet(t *testing.T, b fleetBackend) *fleet {
	t.Helper()
	ctx := context.Background()
	dead, rest, renew := b.make(t)
	f := &fleet{store: rest, dead: make(map[consumer.Key]consumer.ClaimReply)}
	var err error
	if f.in, err = admin.New(rest); err != nil {
		t.Fatal(err)
	}
	deadKeys := keys("dead", deadCount)
	for i, rep := range claimAll(t, dead, deadKeys, func(i int) string { return fmt.Sprintf("replica-7-%d", i) }) {
		f.dead[deadKeys[i]] = rep
	}
	claimAll(t, dead, keys("r70", 5), func(i int) string { return fmt.Sprintf("replica-70-%d", i) })
	liveKeys := keys("live", 25)
	for i, rep := range claimAll(t, rest, liveKeys, func(i int) string { return fmt.Sprintf("replica-3-%d", i) }) {
		f.live = append(f.live, consumer.Owned{Key: liveKeys[i], Owner: fmt.Sprintf("replica-3-%d", i), Ref: rep.Ref, Fence: rep.Fence})
	}
	if renew {
		f.renew(t, rest)
	}
	settle := func(prefix string, n int, fail func(i int) error) {
		for i, k := range keys(prefix, n) {
			res, runs := run(t, rest, k, string(k), fail(i))
			if runs != 1 || res.Fence != 1 {
				t.Fatalf("%s: runs %d, %+v", k, runs, res)
			}
		}
	}
	settle("done", 40, func(int) error { return nil })
	settle("bad", 20, func(i int) error { return consumer.Permanent(fmt.Errorf("card declined %d", i)) })
	settle("again", 10, func(i int) error { return fmt.Errorf("gateway timeout %d", i) })
	testenv.Eventually(t, 30*time.Second, "the 41 dead claims' leases run out", func() bool {
		st, err := f.in.Stats(ctx, admin.StatsQuery{})
		if err != nil {
			t.Fatal(err)
		}
		return st.Stale == deadCount+5
	})
	if got := f.states(t); fmt.Sprint(got) != fmt.Sprint(map[string]int{"started": 66, "completed": 40, "failed": 20, "retry": 10}) {
		t.Fatalf("the fleet's records: %v", got)
	}
	return f
}

// renew keeps the live replica's claims renewed every tenth of the lease until
// the test ends.
func (f *fleet) renew(t *testing.T, s consumer.Store) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(s.Settings().Lease / 10)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for i, err := range s.Extend(context.Background(), f.live) {
				if err != nil {
					t.Errorf("the live replica's renewal of %s: %v", f.live[i].Key, err)
					return
				}
			}
		}
	}()
	t.Cleanup(func() { close(stop); wg.Wait() })
}

// snapshot is every record of the scope, by key.
func (f *fleet) snapshot(t *testing.T) map[consumer.Key]admin.Record {
	t.Helper()
	page, err := f.in.List(context.Background(), admin.Query{Scope: fleetScope, Limit: 1000})
	if err != nil || page.Next != "" {
		t.Fatalf("list: next %q, %v", page.Next, err)
	}
	out := make(map[consumer.Key]admin.Record, len(page.Records))
	for _, r := range page.Records {
		out[r.Key] = r
	}
	if len(out) != len(page.Records) || len(out) != deadCount+othersCount {
		t.Fatalf("listed %d records, %d distinct, want %d", len(page.Records), len(out), deadCount+othersCount)
	}
	return out
}

func (f *fleet) states(t *testing.T) map[string]int {
	t.Helper()
	out := make(map[string]int)
	for _, r := range f.snapshot(t) {
		out[r.State]++
	}
	return out
}

func deadReplica(op consumer.OperatorOp) admin.Bulk {
	return admin.Bulk{Op: op, Filter: admin.Filter{OwnerPrefix: "replica-7-", LeaseRanOut: true}, Actor: "alice", Reason: "replica-7 died"}
}

func preview(t *testing.T, in *admin.Inspector, b admin.Bulk) admin.Plan {
	t.Helper()
	p, err := in.Preview(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func wantReport(t *testing.T, rep admin.Report, applied, moved, wrongState, notFound, left int) {
	t.Helper()
	got := [5]int{rep.Applied, rep.Moved, rep.WrongState, rep.NotFound, rep.Left}
	if got != [5]int{applied, moved, wrongState, notFound, left} || rep.Unknown != 0 {
		t.Fatalf("report: applied, moved, wrong state, not found, left = %v (unknown %d), want %v\n%+v",
			got, rep.Unknown, [5]int{applied, moved, wrongState, notFound, left}, rep)
	}
}

// The 36 stuck keys of a dead replica, among 100 others: the preview counts 36,
// the execution unsticks exactly those 36 and nothing else, and the next
// deliveries run each of them once.
func TestBulkUnstickDeadReplica(t *testing.T) {
	for _, b := range fleetBackends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			f := newFleet(t, b)

			p := preview(t, f.in, deadReplica(consumer.OpUnstick))
			if p.Count != deadCount || len(p.Sample) != admin.DefaultBulkSample || p.Scope != fleetScope || p.Examined != deadCount+othersCount {
				t.Fatalf("preview: count %d, sample %d, scope %q, examined %d", p.Count, len(p.Sample), p.Scope, p.Examined)
			}
			for _, r := range p.Sample {
				if _, ok := f.dead[r.Key]; !ok || !r.Stale() || !strings.HasPrefix(r.Owner, "replica-7-") {
					t.Fatalf("sample holds %+v", r)
				}
			}

			// A preview changes nothing, and a plan over its maximum is refused whole.
			before := f.snapshot(t)
			small := deadReplica(consumer.OpUnstick)
			small.Max = deadCount - 1
			rep, err := f.in.Execute(ctx, preview(t, f.in, small))
			var tm *admin.TooManyError
			if !errors.As(err, &tm) || !errors.Is(err, admin.ErrTooMany) || tm.Count != deadCount || tm.Max != deadCount-1 {
				t.Fatalf("execute over the maximum: %v", err)
			}
			wantReport(t, rep, 0, 0, 0, 0, 0)
			if after := f.snapshot(t); fmt.Sprint(fences(after)) != fmt.Sprint(fences(before)) {
				t.Fatal("a preview or a refused plan changed records")
			}

			rep, err = f.in.Execute(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			wantReport(t, rep, deadCount, 0, 0, 0, 0)
			if rep.Planned != deadCount || len(rep.Skipped) != 0 || rep.Op != "unstick" {
				t.Fatalf("report: %+v", rep)
			}
			after := f.snapshot(t)
			for k, was := range before {
				now := after[k]
				if _, isDead := f.dead[k]; isDead {
					if now.State != "retry" || now.Fence != was.Fence+1 || !hasNotes(now, "unstick by alice: replica-7 died") {
						t.Fatalf("%s after the bulk unstick: %+v", k, now)
					}
					continue
				}
				if now.State != was.State || now.Fence != was.Fence || len(now.Notes) != 0 {
					t.Fatalf("%s changed: was %s at fence %d, now %+v", k, was.State, was.Fence, now)
				}
			}
			if got := f.states(t); fmt.Sprint(got) != fmt.Sprint(map[string]int{"started": 30, "completed": 40, "failed": 20, "retry": 46}) {
				t.Fatalf("states after: %v", got)
			}
			if again := preview(t, f.in, deadReplica(consumer.OpUnstick)); again.Count != 0 {
				t.Fatalf("a preview after the execution counts %d", again.Count)
			}
			// The plan run a second time finds each record moved on, and changes none.
			rep, err = f.in.Execute(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			wantReport(t, rep, 0, deadCount, 0, 0, 0)

			runs := 0
			for k := range f.dead {
				res, n := run(t, f.store, k, string(k), nil)
				if res.Outcome != consumer.Success || res.Fence != 3 {
					t.Fatalf("%s's next delivery: %+v", k, res)
				}
				runs += n
			}
			if runs != deadCount {
				t.Fatalf("the next deliveries ran %d handlers, want %d", runs, deadCount)
			}
		})
	}
}

func fences(recs map[consumer.Key]admin.Record) map[consumer.Key]string {
	out := make(map[consumer.Key]string, len(recs))
	for k, r := range recs {
		out[k] = fmt.Sprintf("%s@%d/%d", r.State, r.Fence, len(r.Notes))
	}
	return out
}

// Each filter counts exactly the records it names.
func TestBulkPreviewFilters(t *testing.T) {
	f := newFleet(t, fleetBackends()[1])
	for _, tc := range []struct {
		name   string
		op     consumer.OperatorOp
		filter admin.Filter
		want   int
	}{
		{"dead replica", consumer.OpUnstick, admin.Filter{OwnerPrefix: "replica-7-", LeaseRanOut: true}, 36},
		{"every lease run out", consumer.OpUnstick, admin.Filter{LeaseRanOut: true}, 41},
		{"every started", consumer.OpUnstick, admin.Filter{}, 66},
		{"owner prefix, live or not", consumer.OpUnstick, admin.Filter{OwnerPrefix: "replica-"}, 66},
		{"the live replica", consumer.OpUnstick, admin.Filter{OwnerPrefix: "replica-3-"}, 25},
		{"key prefix", consumer.OpUnstick, admin.Filter{KeyPrefix: "dead-1"}, 10},
		{"rerun: completed and failed", consumer.OpRerun, admin.Filter{}, 60},
		{"rerun: permanent", consumer.OpRerun, admin.Filter{ErrorKind: "PERMANENT"}, 20},
		{"rerun: exhausted", consumer.OpRerun, admin.Filter{ErrorKind: admin.KindExhausted}, 0},
		{"rerun: error text", consumer.OpRerun, admin.Filter{ErrorContains: "card declined 1"}, 11},
		{"forget: every state but forgotten", consumer.OpForget, admin.Filter{}, 136},
		{"forget: retry with a timeout", consumer.OpForget, admin.Filter{States: []string{"retry"}, ErrorContains: "timeout"}, 10},
		{"forget: older than an hour", consumer.OpForget, admin.Filter{OlderThan: time.Hour}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := preview(t, f.in, admin.Bulk{Op: tc.op, Filter: tc.filter, Actor: "alice", Reason: "r"})
			if p.Count != tc.want {
				t.Fatalf("count %d, want %d", p.Count, tc.want)
			}
		})
	}
}

// Records that move on between the preview and the execution are skipped and
// reported as moved: one completed by its late owner (same fence), one taken
// over and completed by a new delivery, one renewed by its owner, one unstuck
// by another operator. The other 32 are unstuck.
func TestBulkMovedBetweenPreviewAndExecute(t *testing.T) {
	for _, b := range fleetBackends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			f := newFleet(t, b)
			p := preview(t, f.in, deadReplica(consumer.OpUnstick))
			if p.Count != deadCount {
				t.Fatalf("preview counts %d", p.Count)
			}

			late := f.dead["dead-00"]
			if rep := f.store.Settle(ctx, []consumer.Settlement{{Key: "dead-00", Owner: "replica-7-0", Ref: late.Ref, Fence: late.Fence,
				Attempts: late.Attempts, Created: late.Created, Fingerprint: late.Fingerprint, Late: true, Complete: true, Result: []byte(`"ok"`)}})[0]; rep.Err != nil {
				t.Fatalf("the late owner's completion: %v", rep.Err)
			}
			if res, runs := run(t, f.store, "dead-01", "dead-01", nil); runs != 1 || res.Fence != 2 {
				t.Fatalf("takeover of dead-01: runs %d, %+v", runs, res)
			}
			renewed := f.dead["dead-02"]
			if err := f.store.Extend(ctx, []consumer.Owned{{Key: "dead-02", Owner: "replica-7-2", Ref: renewed.Ref, Fence: renewed.Fence}})[0]; err != nil {
				t.Fatalf("renewal of dead-02: %v", err)
			}
			if _, err := f.in.Unstick(ctx, admin.Change{Key: "dead-03", Actor: "bob", Reason: "one by one"}); err != nil {
				t.Fatal(err)
			}

			rep, err := f.in.Execute(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			wantReport(t, rep, deadCount-4, 4, 0, 0, 0)
			why := make(map[consumer.Key]string)
			for _, s := range rep.Skipped {
				why[s.Key] = fmt.Sprintf("%s %s@%d -> %s@%d", s.Why, s.State, s.Fence, s.NowState, s.NowFence)
			}
			want := map[consumer.Key]string{
				"dead-00": "moved started@1 -> completed@1",
				"dead-01": "moved started@1 -> completed@2",
				"dead-02": "moved started@1 -> started@1",
				"dead-03": "moved started@1 -> retry@2",
			}
			if fmt.Sprint(why) != fmt.Sprint(want) {
				t.Fatalf("skipped: %v, want %v", why, want)
			}
			recs := f.snapshot(t)
			for k, w := range map[consumer.Key]string{"dead-00": "completed@1/0", "dead-01": "completed@2/0", "dead-02": "started@1/0",
				"dead-03": "retry@2/1", "dead-04": "retry@2/1", "dead-35": "retry@2/1"} {
				if got := fences(recs)[k]; got != w {
					t.Fatalf("%s is %s, want %s", k, got, w)
				}
			}
			if !hasNotes(recs["dead-03"], "unstick by bob: one by one") || !hasNotes(recs["dead-04"], "unstick by alice: replica-7 died") {
				t.Fatalf("notes: %+v, %+v", recs["dead-03"].Notes, recs["dead-04"].Notes)
			}
		})
	}
}

// cancelAfter is a store whose context is cancelled after n changes applied.
type cancelAfter struct {
	admin.Store
	n      int
	cancel context.CancelFunc
}

func (c *cancelAfter) ChangeRecord(ctx context.Context, oc consumer.OperatorChange) (consumer.OperatorReply, error) {
	rep, err := c.Store.ChangeRecord(ctx, oc)
	if c.n--; c.n == 0 {
		c.cancel()
	}
	return rep, err
}

// An execution stops when its context ends, with exact counts of what it did.
func TestBulkExecuteStopsOnContext(t *testing.T) {
	for _, b := range fleetBackends() {
		t.Run(b.name, func(t *testing.T) {
			f := newFleet(t, b)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			in, err := admin.New(&cancelAfter{Store: f.store, n: 5, cancel: cancel})
			if err != nil {
				t.Fatal(err)
			}
			rep, err := in.Execute(ctx, preview(t, in, deadReplica(consumer.OpUnstick)))
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("execute: %v", err)
			}
			wantReport(t, rep, 5, 0, 0, 0, deadCount-5)
			if got := f.states(t); got["retry"] != 10+5 || got["started"] != 66-5 {
				t.Fatalf("states after the stop: %v", got)
			}
		})
	}
}

func TestBulkRefusals(t *testing.T) {
	s, err := memory.NewStore(consumer.WithScope(fleetScope))
	if err != nil {
		t.Fatal(err)
	}
	in, err := admin.New(s)
	if err != nil {
		t.Fatal(err)
	}
	ok := admin.Bulk{Op: consumer.OpUnstick, Actor: "alice", Reason: "r"}
	for _, tc := range []struct {
		name string
		edit func(b *admin.Bulk)
		want string
	}{
		{"no op", func(b *admin.Bulk) { b.Op = 0 }, "use consumer.OpUnstick"},
		{"no reason", func(b *admin.Bulk) { b.Reason = " " }, "no reason"},
		{"no actor", func(b *admin.Bulk) { b.Actor = "" }, "no actor"},
		{"a state unstick does not change", func(b *admin.Bulk) { b.Filter.States = []string{"completed"} }, `state "completed": unstick changes only records in state started`},
		{"rerun of started", func(b *admin.Bulk) { b.Op = consumer.OpRerun; b.Filter.States = []string{"started"} }, "rerun changes only records in state completed, failed"},
		{"an unknown error kind", func(b *admin.Bulk) { b.Op = consumer.OpRerun; b.Filter.ErrorKind = "bogus" }, `error kind "bogus"`},
		{"error kind on unstick", func(b *admin.Bulk) { b.Filter.ErrorKind = "permanent" }, "select no state unstick changes"},
		{"lease ran out without started", func(b *admin.Bulk) {
			b.Op, b.Filter.States, b.Filter.LeaseRanOut = consumer.OpForget, []string{"retry"}, true
		}, "add state started"},
		{"a negative maximum", func(b *admin.Bulk) { b.Max = -1 }, "max -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := ok
			tc.edit(&b)
			_, err := in.Preview(context.Background(), b)
			if !errors.Is(err, admin.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("preview: %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := in.Execute(context.Background(), admin.Plan{Bulk: ok}); !errors.Is(err, admin.ErrInvalid) {
		t.Fatalf("execute of a plan no preview made: %v", err)
	}
}

// run executes key's handler once through the store and counts its runs.
func run(t *testing.T, s consumer.Store, key consumer.Key, payload string, fail error) (consumer.Result[string], int) {
	t.Helper()
	runs := 0
	res := consumer.ExecuteIdempotently(context.Background(), s, key, []byte(payload), func(ctx context.Context) (string, error) {
		runs++
		return "done", fail
	})
	return res, runs
}

// hasNotes reports whether rec's operator notes are texts, newest first.
func hasNotes(rec admin.Record, texts ...string) bool {
	if len(rec.Notes) != len(texts) {
		return false
	}
	for i, n := range rec.Notes {
		if n.Text != texts[i] || n.Time.IsZero() {
			return false
		}
	}
	return true
}
