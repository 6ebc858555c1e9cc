package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
)

// newStoreFunc makes a store on scope payments with the given lease.
type newStoreFunc func(lease time.Duration) recordStore

// redisStores makes Redis stores on scope payments under prefix.
func redisStores(t *testing.T, prefix string) newStoreFunc {
	c := testenv.Redis(t)
	return func(lease time.Duration) recordStore {
		s, err := redisstore.NewStore(c, consumer.WithPrefix(prefix), consumer.WithScope("payments"), consumer.WithLease(lease))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

// deadReplicaFleet fills scope payments with the 36 stuck keys of replica-7
// (dead-00..35, started, leases run out) among 100 others: 5 stuck keys of
// replica-70, 25 live claims of replica-3 (an hour's lease), 40 completed, 20
// failed for good and 10 to retry. It returns the dead claims and an Inspector.
func deadReplicaFleet(t *testing.T, mk newStoreFunc) (map[consumer.Key]consumer.ClaimReply, recordStore, *admin.Inspector) {
	t.Helper()
	ctx := context.Background()
	short, long := mk(20*time.Millisecond), mk(time.Hour)
	claim := func(s recordStore, prefix, owner string, n int) map[consumer.Key]consumer.ClaimReply {
		out := make(map[consumer.Key]consumer.ClaimReply)
		for i := range n {
			k := consumer.Key(fmt.Sprintf("%s-%02d", prefix, i))
			rep := s.Begin(ctx, []consumer.Claim{{Key: k, Owner: fmt.Sprintf("%s%d", owner, i), Fingerprint: consumer.FingerprintOf([]byte(k)), Start: true}})[0]
			if !rep.Claimed() {
				t.Fatalf("claim %s: %+v", k, rep)
			}
			out[k] = rep
		}
		return out
	}
	dead := claim(short, "dead", "replica-7-", 36)
	claim(short, "r70", "replica-70-", 5)
	claim(long, "live", "replica-3-", 25)
	for _, g := range []struct {
		prefix string
		n      int
		err    func(i int) error
	}{
		{"done", 40, func(int) error { return nil }},
		{"bad", 20, func(i int) error { return consumer.Permanent(fmt.Errorf("card declined %d", i)) }},
		{"again", 10, func(i int) error { return fmt.Errorf("gateway timeout %d", i) }},
	} {
		for i := range g.n {
			k := consumer.Key(fmt.Sprintf("%s-%02d", g.prefix, i))
			consumer.ExecuteIdempotently(ctx, long, k, []byte(k), func(context.Context) (string, error) { return "ok", g.err(i) })
		}
	}
	in, err := admin.New(long)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the 41 dead claims' leases run out", func() bool {
		st, err := in.Stats(ctx, admin.StatsQuery{})
		if err != nil {
			t.Fatal(err)
		}
		return st.Stale == 41 && st.Records == 136
	})
	return dead, long, in
}

// records is every record of scope payments: key -> state@fence/notes.
func records(t *testing.T, in *admin.Inspector) map[consumer.Key]string {
	t.Helper()
	page, err := in.List(context.Background(), admin.Query{Scope: "payments", Limit: 1000})
	if err != nil || page.Next != "" || len(page.Records) != 136 {
		t.Fatalf("list: %d records, next %q, %v", len(page.Records), page.Next, err)
	}
	out := make(map[consumer.Key]string)
	for _, r := range page.Records {
		out[r.Key] = fmt.Sprintf("%s@%d/%d", r.State, r.Fence, len(r.Notes))
	}
	return out
}

// The 36 stuck keys of a dead replica, unstuck through the command: the preview
// counts them and changes nothing; --execute with another count, or past --max,
// is refused; a key its late owner completes after the preview changes the count
// the execution must be given; the execution unsticks exactly the other 35.
func TestBulkUnstickDeadReplicaCLI(t *testing.T) {
	addr, prefix := testenv.RedisAddr(t), testenv.Prefix(t)
	bulkUnstickDeadReplica(t, nil, []string{"--redis", addr, "--prefix", prefix}, redisStores(t, prefix))
}

// bulkUnstickDeadReplica runs the dead replica's bulk unstick through the command
// on the store storeFlags name, which mk makes stores on; env is added to the
// command's environment.
func bulkUnstickDeadReplica(t *testing.T, env, storeFlags []string, mk newStoreFunc) {
	dead, store, in := deadReplicaFleet(t, mk)
	flags := append(slices.Clone(storeFlags), "--scope", "payments")
	unstick := func(extra ...string) result {
		t.Helper()
		args := append(append([]string{"unstick", "--all", "--owner-prefix", "replica-7-", "--lease-ran-out", "--reason", "replica-7 died"}, flags...), extra...)
		return idemkitEnv(t, env, args...)
	}
	before := records(t, in)

	expect(t, unstick(), exitOK, `unstick --all in scope "payments" (state started, owner prefix "replica-7-", lease ran out): 36 records match`,
		"dead-", "replica-7-", "... and 31 more", "nothing changed; to unstick these 36 records, run the same command with --execute 36")
	r := unstick("--json", "--sample", "3")
	var pv struct {
		Op       string
		Count    int
		Executed bool
		Sample   []struct{ Key, Owner string }
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &pv) != nil || pv.Op != "unstick" || pv.Count != 36 || pv.Executed || len(pv.Sample) != 3 {
		t.Fatalf("preview --json: %+v", r)
	}
	expect(t, unstick("--execute", "35"), exitRefused, "--execute 35, but 36 records match now: nothing changed")
	expect(t, unstick("--max", "10"), exitOK, "more than --max 10 match, so --execute would refuse", "give --max 36")
	expect(t, unstick("--max", "10", "--execute", "36"), exitRefused, "36 records match, more than --max 10: nothing changed")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append([]string{"unstick", "k", "--owner-prefix", "replica-7-", "--reason", "r"}, flags...), "--owner-prefix goes with --all"},
		{append([]string{"unstick", "--all", "k", "--reason", "r"}, flags...), "takes no KEY"},
		{append([]string{"unstick", "--all", "--fence", "3", "--reason", "r"}, flags...), "--fence goes with one KEY"},
		{append([]string{"rerun", "--all", "--state", "started", "--reason", "r"}, flags...), "rerun changes only records in state completed, failed"},
		{append([]string{"forget", "--all", "--error-kind", "fatal", "--reason", "r"}, flags...), `error kind "fatal"`},
		{append([]string{"unstick", "--all", "--reason", "r"}, storeFlags...), "no --scope was given"},
	} {
		expect(t, idemkitEnv(t, env, tc.args...), exitUsage, tc.want)
	}
	if after := records(t, in); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatal("a preview or a refused command changed records")
	}

	// dead-00's owner was alive after all and completes it: the count is 35 now.
	late := dead["dead-00"]
	if rep := store.Settle(context.Background(), []consumer.Settlement{{Key: "dead-00", Owner: "replica-7-0", Ref: late.Ref, Fence: late.Fence,
		Attempts: late.Attempts, Created: late.Created, Fingerprint: late.Fingerprint, Late: true, Complete: true, Result: []byte(`"ok"`)}})[0]; rep.Err != nil {
		t.Fatalf("the late owner's completion: %v", rep.Err)
	}
	expect(t, unstick("--execute", "36"), exitRefused, "--execute 36, but 35 records match now: nothing changed")
	r = unstick("--execute", "35", "--json")
	var ex struct {
		Count, Applied, Moved, Left int
		WrongState                  int `json:"wrong_state"`
		NotFound                    int `json:"not_found"`
		Executed                    bool
		Skipped                     []any
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &ex) != nil || !ex.Executed || ex.Count != 35 || ex.Applied != 35 ||
		ex.Moved+ex.WrongState+ex.NotFound+ex.Left != 0 || len(ex.Skipped) != 0 {
		t.Fatalf("execute --json: %+v", r)
	}

	after := records(t, in)
	changed := 0
	for k, was := range before {
		want := was
		switch _, isDead := dead[k]; {
		case k == "dead-00":
			want = "completed@1/0"
		case isDead:
			want, changed = "retry@2/1", changed+1
		}
		if after[k] != want {
			t.Fatalf("%s: was %s, now %s, want %s", k, was, after[k], want)
		}
	}
	if changed != 35 {
		t.Fatalf("%d records unstuck", changed)
	}
	expect(t, idemkitEnv(t, env, append([]string{"inspect", "dead-07"}, flags...)...), exitOK, "retry", "unstick by tester: replica-7 died")
	expect(t, unstick(), exitOK, "0 records match", "nothing to do")
	expect(t, unstick("--execute", "0"), exitOK, "0 planned: 0 applied, 0 moved, 0 wrong state, 0 not found")
}
