package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
)

// bin is the idemkit binary the tests build and run as a user would.
var bin string

func TestMain(m *testing.M) {
	if os.Getenv("IDEMKIT_TEST_WORKER") != "" {
		worker()
		return
	}
	dir, err := os.MkdirTemp("", "idemkit-cli-")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "idemkit")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build idemkit: %v\n%s", err, out)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	testenv.Run(m)
}

// worker is a child process: it claims order-42 with an hour's lease, says so, and
// hangs in its handler until it is killed.
func worker() {
	c := redis.NewClient(&redis.Options{Addr: os.Getenv("IDEMKIT_TEST_REDIS")})
	prefix := os.Getenv("IDEMKIT_TEST_PREFIX")
	store, err := redisstore.NewStore(c, consumer.WithPrefix(prefix), consumer.WithScope("payments"), consumer.WithLease(time.Hour))
	if err != nil {
		panic(err)
	}
	consumer.ExecuteIdempotently(context.Background(), store, "order-42", []byte("charge 42"), func(ctx context.Context) (string, error) {
		c.Set(ctx, prefix+":worker-running", "1", time.Hour)
		select {} // the worker dies here
	})
}

type result struct {
	code           int
	stdout, stderr string
}

// idemkit runs the binary with args and returns what a user sees.
func idemkit(t *testing.T, args ...string) result {
	t.Helper()
	return idemkitEnv(t, nil, args...)
}

// idemkitEnv runs the binary with args and the environment variables env added.
func idemkitEnv(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.Env = append(append(hermetic(os.Environ()), "USER=tester"), env...)
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errOut.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return r
}

// storeEnv are the variables that pick a store: the tests' own environment may
// hold them (IDEMKIT_POSTGRES_DSN and IDEMKIT_DYNAMODB_ENDPOINT name the test
// servers), so the binary sees only those a test gives it.
var storeEnv = []string{"IDEMKIT_REDIS_ADDR", "IDEMKIT_POSTGRES_DSN", "IDEMKIT_POSTGRES_PARTITIONED", "IDEMKIT_DYNAMODB_TABLE",
	"IDEMKIT_DYNAMODB_ENDPOINT"}

// hermetic is environ without storeEnv.
func hermetic(environ []string) []string {
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(storeEnv, name) {
			out = append(out, kv)
		}
	}
	return out
}

func expect(t *testing.T, r result, code int, contains ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
	for _, s := range contains {
		if !strings.Contains(r.stdout+r.stderr, s) {
			t.Fatalf("output lacks %q\nstdout: %s\nstderr: %s", s, r.stdout, r.stderr)
		}
	}
}

// A worker is SIGKILLed holding order-42 with an hour's lease left: list finds it
// stuck, unstick ends the claim with a reason that inspect shows, and the next
// delivery runs it once.
func TestStuckKeyUnstuck(t *testing.T) {
	addr, prefix := testenv.RedisAddr(t), testenv.Prefix(t)
	c := testenv.Redis(t)
	child := testenv.StartSelf(t, "IDEMKIT_TEST_WORKER=1", "IDEMKIT_TEST_REDIS="+addr, "IDEMKIT_TEST_PREFIX="+prefix)
	testenv.Eventually(t, 20*time.Second, "the worker runs order-42", func() bool {
		return c.Exists(context.Background(), prefix+":worker-running").Val() == 1
	})
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_, _ = child.Process.Wait()

	flags := []string{"--redis", addr, "--prefix", prefix, "--scope", "payments"}
	var listed []map[string]any
	testenv.Eventually(t, 10*time.Second, "list finds order-42 started for over a second", func() bool {
		r := idemkit(t, append([]string{"list", "--state", "started", "--older-than", "1s", "--json"}, flags...)...)
		var out struct{ Records []map[string]any }
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil {
			t.Fatalf("list: %+v", r)
		}
		listed = out.Records
		return len(listed) == 1
	})
	if listed[0]["key"] != "order-42" || listed[0]["fence"] != float64(1) || listed[0]["lease_left_ms"].(float64) < 3.5e6 {
		t.Fatalf("listed: %v", listed[0])
	}
	expect(t, idemkit(t, append([]string{"list", "--state", "started"}, flags...)...), 0, "payments  order-42  started", "1 records")

	expect(t, idemkit(t, append([]string{"rerun", "order-42", "--reason", "x"}, flags...)...), 4, "the record is started")
	expect(t, idemkit(t, append([]string{"unstick", "order-42", "--actor", "alice", "--reason", "worker died in the outage"}, flags...)...), 0,
		"unstick payments/order-42: started -> retry, fence 1 -> 2", "its owner's lease had")
	expect(t, idemkit(t, append([]string{"inspect", "order-42"}, flags...)...), 0,
		"retry", "unstick by alice: worker died in the outage")

	store, err := redisstore.NewStore(c, consumer.WithPrefix(prefix), consumer.WithScope("payments"), consumer.WithLease(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	for range 3 { // the next delivery, and two more duplicates
		res := consumer.ExecuteIdempotently(context.Background(), store, "order-42", []byte("charge 42"), func(ctx context.Context) (string, error) {
			runs++
			return "charged", nil
		})
		if res.Outcome != consumer.Success && res.Outcome != consumer.Duplicate {
			t.Fatalf("delivery: %+v", res)
		}
	}
	if runs != 1 {
		t.Fatalf("handler ran %d times after the unstick, want 1", runs)
	}
	r := idemkit(t, append([]string{"inspect", "order-42", "--json"}, flags...)...)
	var rec struct {
		State string
		Fence int64
		Notes []struct{ Text string }
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rec) != nil || rec.State != "completed" || rec.Fence != 3 ||
		len(rec.Notes) != 1 || rec.Notes[0].Text != "unstick by alice: worker died in the outage" {
		t.Fatalf("inspect after the delivery: the record or its operator note is not there: %+v", r)
	}
	expect(t, idemkit(t, append([]string{"inspect", "order-42"}, flags...)...), 0,
		"completed", "notes        2", "unstick by alice: worker died in the outage")
}

func TestUsageAndUnreachable(t *testing.T) {
	addr, prefix := testenv.RedisAddr(t), testenv.Prefix(t)
	flags := []string{"--redis", addr, "--prefix", prefix}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"list", "--bogus"}, 2, "unknown flag: --bogus"},
		{[]string{"list", "--state", "stuck"}, 2, `state "stuck"`},
		{[]string{"list", "--older-than", "soon"}, 2, "invalid argument"},
		{[]string{"inspect"}, 2, "takes KEY"},
		{[]string{"unstick", "k"}, 2, "needs --reason"},
		{[]string{"unstick", "k", "--reason", "r", "--actor", ""}, 2, "needs --actor"},
		{[]string{"keygen"}, 2, "takes NS"},
		{[]string{"inspect", "missing"}, 3, `no record at the key "missing" in scope "default"`},
		{[]string{"--scope", "payments", "forget", "missing", "--reason", "r"}, 3, `no record at the key "missing" in scope "payments"`},
		{[]string{"plan"}, 2, "no source"},
		{[]string{"replay", "--jsonl", "x.jsonl"}, 2, "needs --exec"},
		{[]string{"--redis", "127.0.0.1:1", "--timeout", "300ms", "stats"}, 5, "the Redis server at 127.0.0.1:1 did not answer"},
		{[]string{"--redis", "127.0.0.1:1", "--timeout", "300ms", "inspect", "k"}, 5, "did not answer"},
		{[]string{"plan", "--topic", "t", "--kafka-brokers", "127.0.0.1:1", "--timeout", "300ms"}, 5, "the Kafka brokers at 127.0.0.1:1 did not answer"},
	} {
		r := idemkit(t, append(flags, tc.args...)...)
		expect(t, r, tc.code, tc.want)
		if strings.Contains(r.stderr, "pool.go") {
			t.Fatalf("%v: go-redis's own log leaked: %s", tc.args, r.stderr)
		}
	}
	ns := "https://example.com/charges"
	want := consumer.NewKey(uuid.NewSHA1(uuid.NameSpaceURL, []byte(ns)), "order", "42")
	expect(t, idemkit(t, "keygen", ns, "order", "42"), 0, string(want)+"\n")
	u := uuid.New()
	expect(t, idemkit(t, "keygen", u.String(), "a", "b"), 0, string(consumer.NewKey(u, "a", "b")))
}

// fill makes records in scope: n completed, n failed, n started.
func fill(t *testing.T, c redis.UniversalClient, prefix, scope string, n int) {
	t.Helper()
	store, err := redisstore.NewStore(c, consumer.WithPrefix(prefix), consumer.WithScope(scope), consumer.WithLease(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < n; i++ {
		consumer.ExecuteIdempotently(ctx, store, consumer.Key(fmt.Sprintf("done-%d", i)), nil, func(context.Context) (int, error) { return 1, nil })
		consumer.ExecuteIdempotently(ctx, store, consumer.Key(fmt.Sprintf("bad-%d", i)), nil, func(context.Context) (int, error) {
			return 0, consumer.Permanent(errors.New("card declined"))
		})
		store.Begin(ctx, []consumer.Claim{{Key: consumer.Key(fmt.Sprintf("running-%d", i)), Owner: "w"}})
	}
}

func TestListAndStatsOnCluster(t *testing.T) {
	cl := testenv.RedisCluster(t)
	prefix := testenv.Prefix(t)
	fill(t, cl.Client(t), prefix, "payments", 40)
	fill(t, cl.Client(t), prefix, "emails", 10)
	flags := []string{"--redis", strings.Join(cl.Addrs(), ","), "--cluster", "--prefix", prefix}

	r := idemkit(t, append([]string{"stats", "--json", "--scan-count", "20"}, flags...)...)
	var st struct {
		Counts  map[string]int
		Records int
		Sampled bool
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &st) != nil {
		t.Fatalf("stats: %+v", r)
	}
	if st.Records != 150 || st.Counts["completed"] != 50 || st.Counts["failed"] != 50 || st.Counts["started"] != 50 || st.Sampled {
		t.Fatalf("stats on the cluster: %+v", st)
	}
	expect(t, idemkit(t, append([]string{"stats", "--scope", "payments"}, flags...)...), 0, "completed  40", "total      120", "oldest started: payments/running-")
	expect(t, idemkit(t, append([]string{"stats", "--max-records", "10", "--scan-count", "5"}, flags...)...), 0, "SAMPLED")

	r = idemkit(t, append([]string{"list", "--state", "failed", "--scope", "payments", "--limit", "1000", "--json"}, flags...)...)
	var page struct {
		Records []struct{ Key, State, Scope string }
		Next    string
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &page) != nil {
		t.Fatalf("list: %+v", r)
	}
	seen := map[string]bool{}
	for _, rec := range page.Records {
		if rec.State != "failed" || rec.Scope != "payments" || !strings.HasPrefix(rec.Key, "bad-") {
			t.Fatalf("listed %+v", rec)
		}
		seen[rec.Key] = true
	}
	if len(seen) != 40 || page.Next != "" {
		t.Fatalf("list failed: %d distinct keys, next %q", len(seen), page.Next)
	}
	// Page by page with a small limit: every started record of every scope, once.
	seen = map[string]bool{}
	cursor := ""
	for pages := 0; ; pages++ {
		args := append([]string{"list", "--state", "started", "--limit", "7", "--scan-count", "10", "--json"}, flags...)
		if cursor != "" {
			args = append(args, "--cursor", cursor)
		}
		r := idemkit(t, args...)
		page.Records, page.Next = nil, ""
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &page) != nil || len(page.Records) > 7 || pages > 100 {
			t.Fatalf("list page %d: %+v", pages, r)
		}
		for _, rec := range page.Records {
			seen[rec.Scope+"/"+rec.Key] = true
		}
		if cursor = page.Next; cursor == "" {
			break
		}
	}
	if len(seen) != 50 {
		t.Fatalf("paged listing found %d started records, want 50", len(seen))
	}
}

func TestPlanAndReplayKafka(t *testing.T) {
	const n, processed = 100, 60
	brokers, _ := testenv.Kafka(t, 3, "events")
	addr, prefix := testenv.RedisAddr(t), testenv.Prefix(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("events"))
	if err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("evt-%03d", i)
		recs = append(recs, &kgo.Record{Key: []byte(k), Value: []byte(k), Headers: []kgo.RecordHeader{{Key: "Idempotency-Key", Value: []byte(k)}}})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	store, err := redisstore.NewStore(testenv.Redis(t), consumer.WithPrefix(prefix), consumer.WithScope("payments"))
	if err != nil {
		t.Fatal(err)
	}
	var items []consumer.BatchItem
	for i := 0; i < processed; i++ {
		k := fmt.Sprintf("evt-%03d", i)
		items = append(items, consumer.BatchItem{Key: consumer.Key(k), Payload: []byte(k)})
	}
	consumer.ExecuteBatch(context.Background(), store, items, func(context.Context, int, consumer.BatchItem) (int, error) { return 1, nil })

	flags := []string{"--redis", addr, "--prefix", prefix, "--scope", "payments", "--kafka-brokers", strings.Join(brokers, ","), "--topic", "events"}
	planFile := filepath.Join(t.TempDir(), "plan.json")
	r := idemkit(t, append([]string{"plan", "--json", "--out", planFile}, flags...)...)
	var plan struct {
		Messages int
		Counts   map[string]int
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &plan) != nil {
		t.Fatalf("plan: %+v", r)
	}
	if plan.Messages != n || plan.Counts["DUPLICATE"] != processed || plan.Counts["NEW"] != n-processed {
		t.Fatalf("plan: %+v", plan)
	}
	if b, err := os.ReadFile(planFile); err != nil || !bytes.Contains(b, []byte(`"NEW": 40`)) {
		t.Fatalf("plan file: %s, %v", b, err)
	}
	expect(t, idemkit(t, append([]string{"plan"}, flags...)...), 0, "DUPLICATE    60", "NEW          40")

	dir := t.TempDir()
	ran := filepath.Join(dir, "ran")
	command := `printf '%s\n' "$IDEMKIT_KEY" >> ` + ran
	expect(t, idemkit(t, append([]string{"replay", "--exec", command}, flags...)...), 0, "dry run: nothing was run; add --execute to run the 40 NEW")
	if _, err := os.Stat(ran); !os.IsNotExist(err) {
		t.Fatalf("a dry run ran something: %v", err)
	}
	cp := filepath.Join(dir, "cp.json")
	r = idemkit(t, append([]string{"replay", "--exec", command, "--execute", "--checkpoint", cp, "--progress", "json", "--batch-size", "25"}, flags...)...)
	expect(t, r, 0, "RAN          40", "DUPLICATE    60")
	if lines := strings.Count(r.stderr, `"final":`); lines < 2 || !strings.Contains(r.stderr, `"final":true`) {
		t.Fatalf("progress lines: %s", r.stderr)
	}
	expect(t, idemkit(t, append([]string{"replay", "--exec", command, "--execute", "--checkpoint", cp}, flags...)...), 0, "RAN          0")
	b, _ := os.ReadFile(ran)
	keys := strings.Fields(string(b))
	seen := map[string]bool{}
	for _, k := range keys {
		var i int
		fmt.Sscanf(k, "evt-%03d", &i)
		if seen[k] || i < processed {
			t.Fatalf("ran %s wrongly (twice, or processed already): %v", k, keys)
		}
		seen[k] = true
	}
	if len(keys) != n-processed {
		t.Fatalf("the command ran %d times, want %d", len(keys), n-processed)
	}

	// A JSON Lines replay whose command asks to retry later ends with exit 6.
	jl := filepath.Join(dir, "m.jsonl")
	os.WriteFile(jl, []byte(`{"key":"j1","payload":"x"}`+"\n"), 0o600)
	expect(t, idemkit(t, "--redis", addr, "--prefix", prefix, "--scope", "payments", "replay", "--jsonl", jl, "--exec", "exit 75", "--execute"), 6,
		"did not settle", "ERROR line 1: j1: --exec command: exit 75 (retry later)")
}

func TestBench(t *testing.T) {
	addr, prefix := testenv.RedisAddr(t), testenv.Prefix(t)
	r := idemkit(t, "--redis", addr, "--prefix", prefix, "bench", "-n", "50", "--batch-n", "500", "-b", "50")
	expect(t, r, 0, "floor: begin + complete scripts", "ExecuteIdempotently", "ExecuteBatch B=50")
	if strings.Count(r.stdout, "\n") != 5 {
		t.Fatalf("bench table: %q", r.stdout)
	}
}

func TestRedriveCLI(t *testing.T) {
	brokers, _ := testenv.Kafka(t, 1, "pay", "pay.dlq")
	addr, prefix := testenv.RedisAddr(t), testenv.Prefix(t)
	store, err := redisstore.NewStore(testenv.Redis(t), consumer.WithPrefix(prefix), consumer.WithScope("payments"))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := 0; i < 3; i++ {
		k := fmt.Sprintf("p-%d", i)
		consumer.ExecuteIdempotently(context.Background(), store, consumer.Key(k), []byte(k), func(context.Context) (int, error) {
			return 0, consumer.Permanent(errors.New("declined"))
		})
		rec := &kgo.Record{Topic: "pay.dlq", Key: []byte(k), Value: []byte(k), Headers: []kgo.RecordHeader{
			{Key: "Idempotency-Key", Value: []byte(k)}, {Key: "idemkit-original-topic", Value: []byte("pay")},
			{Key: "idemkit-key", Value: []byte(k)}, {Key: "idemkit-outcome", Value: []byte("ERROR")}}}
		if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	flags := []string{"--redis", addr, "--prefix", prefix, "--scope", "payments", "--kafka-brokers", strings.Join(brokers, ","), "redrive", "--topic", "pay.dlq"}
	expect(t, idemkit(t, flags...), 0, "NOT_RERUN     3", "dry run")
	expect(t, idemkit(t, append(flags, "--rerun", "--execute")...), 2, "needs --reason")
	expect(t, idemkit(t, append(flags, "--rerun", "--execute", "--reason", "fixed")...), 0, "REDRIVEN      3")
	expect(t, idemkit(t, "--redis", addr, "--prefix", prefix, "--scope", "payments", "inspect", "p-1"), 0, "retry", "rerun by tester: fixed")
	src, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("pay"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var got []*kgo.Record
	for len(got) < 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		fs := src.PollFetches(ctx)
		timedOut := ctx.Err() != nil
		cancel()
		if timedOut {
			t.Fatalf("republished records: %d", len(got))
		}
		got = append(got, fs.Records()...)
	}
	for _, r := range got {
		h := map[string]string{}
		for _, x := range r.Headers {
			h[x.Key] = string(x.Value)
		}
		if h["idemkit-replay-count"] != "1" || h["Idempotency-Key"] != string(r.Key) || h["idemkit-original-topic"] != "" {
			t.Fatalf("republished headers: %v", h)
		}
	}
}
