package admin_test

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
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { testenv.Run(m) }

// backend is a store the Inspector runs on, made fresh per test.
type backend struct {
	name string
	make func(t *testing.T, opts ...consumer.Option) store
}

type store interface {
	consumer.Store
	admin.Store
}

func backends() []backend {
	return []backend{
		{"memory", func(t *testing.T, opts ...consumer.Option) store {
			s, err := consumer.NewMemoryStore(opts...)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		{"redis", func(t *testing.T, opts ...consumer.Option) store {
			c := testenv.Redis(t)
			s, err := consumer.NewRedisStore(c, append([]consumer.Option{consumer.WithPrefix(testenv.Prefix(t))}, opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
	}
}

// claimDead leaves key started by an owner that will never come back.
func claimDead(t *testing.T, s consumer.Store, key consumer.Key) consumer.ClaimReply {
	t.Helper()
	rep := s.Begin(context.Background(), []consumer.Claim{{Key: key, Owner: "dead-owner", Fingerprint: consumer.FingerprintOf([]byte("p"))}})[0]
	if !rep.Claimed() {
		t.Fatalf("claim %s: %+v", key, rep)
	}
	return rep
}

// run executes key once and returns the result and how often the handler ran.
func run(t *testing.T, s consumer.Store, key consumer.Key, payload string, fail error) (consumer.Result[string], int) {
	t.Helper()
	runs := 0
	res := consumer.ExecuteIdempotently(context.Background(), s, key, []byte(payload), func(ctx context.Context) (string, error) {
		runs++
		return "done", fail
	})
	return res, runs
}

func TestTransitions(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			s := b.make(t, consumer.WithScope("svc"), consumer.WithLease(time.Hour))
			in, err := admin.New(s)
			if err != nil {
				t.Fatal(err)
			}
			who := func(k consumer.Key, reason string) admin.Change {
				return admin.Change{Key: k, Actor: "alice", Reason: reason}
			}

			t.Run("unstick", func(t *testing.T) {
				key := consumer.Key("stuck")
				claim := claimDead(t, s, key)
				res, err := in.Unstick(ctx, who(key, "worker died in the outage"))
				if err != nil {
					t.Fatal(err)
				}
				if res.Before != "started" || res.After != "retry" || res.Fence != 1 || res.NewFence != 2 || res.LeaseLeft < 59*time.Minute {
					t.Fatalf("unstick: %+v", res)
				}
				rec, err := in.Inspect(ctx, "", key)
				if err != nil {
					t.Fatal(err)
				}
				note := "unstick by alice: worker died in the outage"
				if rec.State != "retry" || rec.Attempts != 0 || len(rec.History) != 0 || !hasNotes(rec, note) {
					t.Fatalf("inspect after unstick: %+v", rec)
				}
				// The old owner, were it alive, is told at its next renewal, settlement or release.
				owned := []consumer.Owned{{Key: key, Owner: "dead-owner", Ref: claim.Ref, Fence: claim.Fence}}
				if err := s.Extend(ctx, owned)[0]; !errors.Is(err, consumer.ErrLeaseLost) {
					t.Fatalf("old owner's renewal: %v", err)
				}
				if err := s.Release(ctx, owned)[0]; !errors.Is(err, consumer.ErrLeaseLost) {
					t.Fatalf("old owner's release: %v", err)
				}
				for _, complete := range []bool{true, false} {
					rep := s.Settle(ctx, []consumer.Settlement{{Key: key, Owner: "dead-owner", Ref: claim.Ref, Fence: claim.Fence,
						Attempts: 1, Created: claim.Created, Fingerprint: claim.Fingerprint, Complete: complete, Message: "late"}})[0]
					if !errors.Is(rep.Err, consumer.ErrLeaseLost) {
						t.Fatalf("old owner's settlement (complete %v): %+v", complete, rep)
					}
				}
				r, runs := run(t, s, key, "p", nil)
				if runs != 1 || r.Outcome != consumer.Success || r.Fence != 3 || r.Attempt != 1 {
					t.Fatalf("next delivery: runs %d, %+v", runs, r)
				}
				if _, runs := run(t, s, key, "p", nil); runs != 0 {
					t.Fatalf("a later duplicate ran %d times", runs)
				}
				if rec := inspect(t, in, key); rec.State != "completed" || !hasNotes(rec, note) {
					t.Fatalf("the operator's note did not survive the completion: %+v", rec)
				}
				if _, err := in.Unstick(ctx, who(key, "again")); !errors.Is(err, admin.ErrWrongState) {
					t.Fatalf("unstick of a completed key: %v", err)
				}
			})

			t.Run("forget", func(t *testing.T) {
				key := consumer.Key("forget-me")
				run(t, s, key, "v1", nil)
				run(t, s, key, "v1", consumer.Permanent(errors.New("never"))) // a duplicate: not run
				res, err := in.Forget(ctx, who(key, "re-encoded payloads"))
				if err != nil || res.Before != "completed" || res.After != "forgotten" || res.NewFence != 1 {
					t.Fatalf("forget: %+v, %v", res, err)
				}
				note := "forget by alice: re-encoded payloads"
				rec, err := in.Inspect(ctx, "", key)
				if err != nil || rec.State != "forgotten" || rec.Fence != 1 || !rec.Fingerprint.IsZero() || !hasNotes(rec, note) {
					t.Fatalf("inspect after forget: %+v, %v", rec, err)
				}
				// A different payload is no conflict now; the fence is still above the old one.
				r, runs := run(t, s, key, "v2", nil)
				if runs != 1 || r.Outcome != consumer.Success || r.Fence != 2 || r.Attempt != 1 {
					t.Fatalf("after forget: runs %d, %+v", runs, r)
				}
				if rec := inspect(t, in, key); rec.State != "completed" || !hasNotes(rec, note) {
					t.Fatalf("the operator's note did not survive the fresh start and its completion: %+v", rec)
				}
				if _, err := in.Forget(ctx, who("nothing-here", "x")); !errors.Is(err, admin.ErrNotFound) {
					t.Fatalf("forget of no record: %v", err)
				}
			})

			t.Run("rerun", func(t *testing.T) {
				for _, tc := range []struct {
					name string
					err  error
				}{{"failed", consumer.Permanent(errors.New("bad card"))}, {"completed", nil}} {
					key := consumer.Key("rerun-" + tc.name)
					run(t, s, key, "p", tc.err)
					res, err := in.Rerun(ctx, admin.Change{Key: key, Actor: "bob", Reason: "fixed in v2", Fence: 1})
					if err != nil || res.Before != tc.name || res.After != "retry" {
						t.Fatalf("rerun %s: %+v, %v", tc.name, res, err)
					}
					r, runs := run(t, s, key, "p", nil)
					if runs != 1 || r.Outcome != consumer.Success || r.Fence != 2 || r.Attempt != 1 {
						t.Fatalf("rerun %s: runs %d, %+v", tc.name, runs, r)
					}
					if rec := inspect(t, in, key); rec.State != "completed" || !hasNotes(rec, "rerun by bob: fixed in v2") {
						t.Fatalf("rerun %s: the operator's note did not survive the completion: %+v", tc.name, rec)
					}
					if _, runs := run(t, s, key, "p", nil); runs != 0 {
						t.Fatalf("rerun %s: a later duplicate ran %d times", tc.name, runs)
					}
					if r, _ := run(t, s, key, "other", nil); !errors.Is(r.Err, consumer.ErrPayloadConflict) {
						t.Fatalf("rerun %s keeps the fingerprint: %+v", tc.name, r)
					}
				}
				key := consumer.Key("rerun-running")
				claimDead(t, s, key)
				var se *admin.StateError
				if _, err := in.Rerun(ctx, who(key, "x")); !errors.As(err, &se) || se.State != "started" {
					t.Fatalf("rerun of a running key: %v", err)
				}
				if _, err := in.Rerun(ctx, admin.Change{Key: key, Actor: "bob", Reason: "x", Fence: 7}); !errors.Is(err, admin.ErrFenceMoved) {
					t.Fatalf("rerun at a stale fence: %v", err)
				}
			})

			t.Run("notes survive every transition", func(t *testing.T) {
				key := consumer.Key("noted")
				claim := func(owner string) consumer.ClaimReply {
					t.Helper()
					c := s.Begin(ctx, []consumer.Claim{{Key: key, Owner: owner, Fingerprint: consumer.FingerprintOf([]byte("p")), Locked: true}})[0]
					if !c.Claimed() {
						t.Fatalf("claim by %s: %+v", owner, c)
					}
					return c
				}
				var notes []string
				change := func(fn func(context.Context, admin.Change) (admin.Result, error), c admin.Change) {
					t.Helper()
					res, err := fn(ctx, c)
					if err != nil {
						t.Fatal(err)
					}
					notes = append([]string{res.Note}, notes...)
				}
				expect := func(state, after string) {
					t.Helper()
					if rec := inspect(t, in, key); rec.State != state || !hasNotes(rec, notes[:min(len(notes), 8)]...) {
						t.Fatalf("after %s: want %s with notes %q, got %+v", after, state, notes, rec)
					}
				}
				claim("dead-owner")
				change(in.Unstick, who(key, "worker died"))
				if _, runs := run(t, s, key, "p", errors.New("flaky upstream")); runs != 1 {
					t.Fatal("the failing attempt did not run")
				}
				expect("retry", "a failure")
				run(t, s, key, "p", consumer.Abandon(errors.New("rate limited")))
				expect("retry", "a release")
				claim("worker-a")
				expect("started", "a claim")
				c := claim("worker-b") // under the key's lock: worker-a lost it
				if c.Status != consumer.StatusTakenOver {
					t.Fatalf("claim under the lock: %+v", c)
				}
				expect("started", "a takeover")
				rep := s.Settle(ctx, []consumer.Settlement{{Key: key, Owner: "worker-b", Ref: c.Ref, Fence: c.Fence, Attempts: c.Attempts,
					Created: c.Created, Fingerprint: c.Fingerprint, Complete: true, Result: []byte(`"done"`)}})[0]
				if rep.Err != nil {
					t.Fatal(rep.Err)
				}
				expect("completed", "a completion")
				change(in.Rerun, who(key, "fixed in v2"))
				run(t, s, key, "p", consumer.Permanent(errors.New("card declined")))
				expect("failed", "a permanent failure")
				change(in.Forget, who(key, "payload re-encoded"))
				if _, runs := run(t, s, key, "re-encoded", nil); runs != 1 {
					t.Fatal("the forgotten key did not run afresh")
				}
				expect("completed", "a forget's fresh start and its completion")

				// The newest 8 are kept; the longest note the Inspector writes is kept whole.
				for i := range 6 {
					c := who(key, fmt.Sprint("rerun ", i))
					if i == 5 {
						c = admin.Change{Key: key, Actor: strings.Repeat("a", 128), Reason: strings.Repeat("r", 1024)}
					}
					change(in.Rerun, c)
					run(t, s, key, "re-encoded", nil)
				}
				if len(notes[0]) != len("rerun by : ")+128+1024 {
					t.Fatalf("the longest note is %d bytes", len(notes[0]))
				}
				expect("completed", "nine operator changes")
			})

			t.Run("bad input", func(t *testing.T) {
				for _, c := range []admin.Change{
					{Key: "k", Actor: "alice"},
					{Key: "k", Reason: "why"},
					{Key: "", Actor: "alice", Reason: "why"},
					{Key: "k", Actor: "a\nb", Reason: "why"},
					{Key: "k", Actor: "alice", Reason: strings.Repeat("x", 2000)},
				} {
					if _, err := in.Forget(ctx, c); err == nil {
						t.Fatalf("forget %+v: no error", c)
					}
				}
			})
		})
	}
}

// inspect reads key's record in the store's own scope.
func inspect(t *testing.T, in *admin.Inspector, key consumer.Key) admin.Record {
	t.Helper()
	rec, err := in.Inspect(context.Background(), "", key)
	if err != nil {
		t.Fatalf("inspect %s: %v", key, err)
	}
	return rec
}

// hasNotes reports whether rec holds exactly these operator notes, newest first.
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

// fill makes n records of each state in scope: completed, failed, retry, started.
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
				run(t, s, key, "p", consumer.Permanent(errors.New("no")))
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

func checkListAndStats(t *testing.T, mk func(scope string) store, multiScope bool) {
	ctx := context.Background()
	a := mk("svc-a")
	want := fill(t, a, 30)
	in, err := admin.New(a)
	if err != nil {
		t.Fatal(err)
	}
	if multiScope {
		fill(t, mk("svc-b"), 5)
	}
	for _, st := range []string{"completed", "failed", "retry", "started"} {
		got := listAll(t, in, admin.Query{Scope: "svc-a", States: []string{st}, Limit: 7, ScanCount: 10})
		if w := scoped("svc-a", want[st]); fmt.Sprint(got) != fmt.Sprint(w) {
			t.Fatalf("list %s: got %d %v, want %d", st, len(got), got, len(w))
		}
	}
	if got := listAll(t, in, admin.Query{Scope: "svc-a", Limit: 1000}); len(got) != 120 {
		t.Fatalf("list svc-a: %d records, want 120", len(got))
	}
	if got := listAll(t, in, admin.Query{States: []string{"started"}, Limit: 11, ScanCount: 25}); multiScope && len(got) != 35 {
		t.Fatalf("list every scope, started: %d records, want 35: %v", len(got), got)
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

func TestListAndStats(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		checkListAndStats(t, func(scope string) store {
			s, err := consumer.NewMemoryStore(consumer.WithScope(scope), consumer.WithLease(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}, false)
	})
	t.Run("redis", func(t *testing.T) {
		c, prefix := testenv.Redis(t), testenv.Prefix(t)
		checkListAndStats(t, func(scope string) store { return redisStore(t, c, prefix, scope) }, true)
	})
	t.Run("cluster", func(t *testing.T) {
		cl := testenv.RedisCluster(t).Client(t)
		prefix := testenv.Prefix(t)
		checkListAndStats(t, func(scope string) store { return redisStore(t, cl, prefix, scope) }, true)
		// The records are spread over all three primaries.
		s := redisStore(t, cl, prefix, "svc-a")
		nodes := map[string]int{}
		for cur := ""; ; {
			p, err := s.ScanRecords(context.Background(), consumer.ScanQuery{Scope: "svc-a", Cursor: cur, Count: 50})
			if err != nil {
				t.Fatal(err)
			}
			nodes[p.Node] += len(p.Records)
			if cur = p.Next; cur == "" {
				break
			}
		}
		if len(nodes) != 3 {
			t.Fatalf("records found on %d primaries, want 3: %v", len(nodes), nodes)
		}
	})
}

func redisStore(t *testing.T, c redis.UniversalClient, prefix, scope string) *consumer.RedisStore {
	t.Helper()
	s, err := consumer.NewRedisStore(c, consumer.WithPrefix(prefix), consumer.WithScope(scope), consumer.WithLease(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCorruptAndOtherKeys(t *testing.T) {
	ctx := context.Background()
	c, prefix := testenv.Redis(t), testenv.Prefix(t)
	s := redisStore(t, c, prefix, "svc")
	run(t, s, "good", "p", nil)
	c.Set(ctx, prefix+":{svc:junk}", "not a record", time.Hour)
	c.HSet(ctx, prefix+":{svc:hash}", "f", "v")
	c.Expire(ctx, prefix+":{svc:hash}", time.Hour)
	c.Set(ctx, prefix+":other", "x", time.Hour) // under the prefix, not a record key
	in, _ := admin.New(s)
	st, err := in.Stats(ctx, admin.StatsQuery{Scope: "svc"})
	if err != nil || st.Counts["completed"] != 1 || st.Counts["corrupt"] != 2 || st.Records != 3 {
		t.Fatalf("stats: %+v, %v", st, err)
	}
	if _, err := in.Inspect(ctx, "", "junk"); !errors.Is(err, admin.ErrCorrupt) {
		t.Fatalf("inspect junk: %v", err)
	}
	if _, err := in.Unstick(ctx, admin.Change{Key: "hash", Actor: "a", Reason: "r"}); !errors.Is(err, consumer.ErrCorruptRecord) {
		t.Fatalf("unstick of a hash: %v", err)
	}
	got := listAll(t, in, admin.Query{Scope: "svc", States: []string{"corrupt"}, Limit: 10})
	if fmt.Sprint(got) != "[svc/hash svc/junk]" {
		t.Fatalf("corrupt: %v", got)
	}
}
