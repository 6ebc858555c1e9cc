package browsertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/admin/ui"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/replay"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) {
	if os.Getenv("IDEMKIT_TEST_WORKER") != "" {
		worker()
		return
	}
	testenv.Run(m)
}

// stuckCount is how many records the worker is running when it is SIGKILLed.
const stuckCount = 12

// workerLease is the worker's lease: it runs out soon after the worker dies.
const workerLease = 2 * time.Second

// worker is the child process: it runs order-000..011 in handlers that never
// return, counts them in Redis, and waits to be killed.
func worker() {
	c := redis.NewClient(&redis.Options{Addr: os.Getenv("IDEMKIT_TEST_REDIS")})
	prefix := os.Getenv("IDEMKIT_TEST_PREFIX")
	store, err := redisstore.NewStore(c, consumer.WithPrefix(prefix), consumer.WithScope("payments"), consumer.WithLease(workerLease))
	if err != nil {
		panic(err)
	}
	for i := range stuckCount {
		key := consumer.Key(fmt.Sprintf("order-%03d", i))
		go consumer.ExecuteIdempotently(context.Background(), store, key, []byte(key), func(ctx context.Context) (string, error) {
			c.Incr(ctx, prefix+":running")
			select {} // the worker dies here
		})
	}
	select {}
}

// chromium is the browser to drive, or "" when there is none.
func chromium() string {
	if p := os.Getenv("IDEMKIT_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// screenshots is where the test saves its screenshots.
func screenshots(t *testing.T) string {
	if dir := os.Getenv("IDEMKIT_UI_SCREENSHOTS"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	return t.TempDir()
}

// TestBrowser: a worker is SIGKILLed while it runs 12 records. In the browser,
// the operator opens the overview, follows the lease-ran-out count to the
// records, filters to the dead worker's owner prefix, unsticks the 12 in bulk
// with a reason and the count typed, and sees them completed once they are
// delivered again. A cross-origin form post is refused and changes nothing.
func TestBrowser(t *testing.T) {
	browser := chromium()
	if browser == "" {
		if os.Getenv("IDEMKIT_REQUIRE_SERVICES") == "1" {
			t.Fatal("no chromium: install it (apt-get install chromium) or name it in IDEMKIT_CHROMIUM")
		}
		t.Skip("no chromium (apt-get install chromium, or IDEMKIT_CHROMIUM)")
	}
	shots := screenshots(t)
	addr, prefix := testenv.RedisAddr(t), testenv.Prefix(t)
	rdb := testenv.Redis(t)
	store, err := redisstore.NewStore(rdb, consumer.WithPrefix(prefix), consumer.WithScope("payments"), consumer.WithLease(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// Records beside the stuck ones: completed orders, a failed one, a retry.
	for i := range 30 {
		key := consumer.Key(fmt.Sprintf("invoice-%03d", i))
		run(t, store, key, `{"invoice":"`+string(key)+`","status":"sent"}`, nil)
	}
	run(t, store, "refund-007", "", consumer.Permanent(errors.New(`gateway said <b>card declined</b> (code 51)`)))
	run(t, store, "refund-008", "", errors.New("gateway timeout after 10s"))
	victim := consumer.Key("victim-1")
	if rep := store.Begin(ctx, []consumer.Claim{{Key: victim, Owner: "live-worker", Start: true}})[0]; !rep.Claimed() {
		t.Fatalf("claim %s: %+v", victim, rep)
	}

	child := testenv.StartSelf(t, "IDEMKIT_TEST_WORKER=1", "IDEMKIT_TEST_REDIS="+addr, "IDEMKIT_TEST_PREFIX="+prefix)
	testenv.Eventually(t, 30*time.Second, "the worker runs its 12 records", func() bool {
		n, _ := rdb.Get(ctx, prefix+":running").Int()
		return n == stuckCount
	})
	if err := child.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_, _ = child.Process.Wait()
	in, err := admin.New(store)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := in.Inspect(ctx, "", "order-000")
	if err != nil {
		t.Fatal(err)
	}
	owner, _, _ := strings.Cut(rec.Owner, "-")
	owner += "-" // the dead process's owner prefix
	testenv.Eventually(t, 30*time.Second, "the dead worker's leases run out", func() bool {
		st, err := in.Stats(ctx, admin.StatsQuery{})
		return err == nil && st.Stale == stuckCount
	})

	plans := t.TempDir()
	writePlan(t, store, plans)
	h, err := ui.New(in, ui.WithPrefix("/idemkit"), ui.WithRefresh(0), ui.WithPlans(os.DirFS(plans)),
		ui.WithActor(func(*http.Request) (string, error) { return "alice", nil }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	mux := http.NewServeMux()
	mux.Handle("/idemkit/", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	base := srv.URL + "/idemkit"

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 900), chromedp.DisableGPU)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	if err := chromedp.Do(bctx); err != nil { // starts the browser, with no deadline on its context
		t.Fatalf("start %s: %v", browser, err)
	}
	step := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, time.Minute)
		defer cancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, time.Minute)
		defer cancel()
		s, err := chromedp.Run(sctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("the text of %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	eval := func(expr string) any {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Evaluate[any](expr))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return v
	}
	location := func() string {
		t.Helper()
		u, err := chromedp.Run(bctx, chromedp.Location())
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err == nil {
			err = os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644)
		}
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
	}
	rows := func() int {
		t.Helper()
		return int(eval(`document.querySelectorAll("#records tbody tr td.key").length`).(float64))
	}

	step("open the overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#counts")))
	shot("overview")
	if got := text("#stale .big"); got != strconv.Itoa(stuckCount) {
		t.Fatalf("the overview's lease-ran-out count: %q, want %d", got, stuckCount)
	}
	step("follow the lease-ran-out count", chromedp.Click(chromedp.CSS("#stale .big a")), chromedp.WaitVisible(chromedp.CSS("#filter")),
		chromedp.SetValue(chromedp.CSS(`#filter input[name="owner"]`), owner),
		chromedp.Submit(chromedp.CSS(`#filter input[name="owner"]`)), chromedp.WaitVisible(chromedp.CSS("#bulk")))
	testenv.Eventually(t, 30*time.Second, "the filtered page loads", func() bool { return strings.Contains(location(), "owner=") })
	shot("records")
	if n, at := rows(), location(); n != stuckCount || !strings.Contains(at, "stale=1") {
		t.Fatalf("the filtered records: %d rows at %s, want %d", n, at, stuckCount)
	}
	step("preview the bulk unstick", chromedp.SetValue(chromedp.CSS(`#bulk select[name="op"]`), "unstick"),
		chromedp.SendKeys(chromedp.CSS(`#bulk input[name="reason"]`), "worker SIGKILLed in the deploy"),
		chromedp.Submit(chromedp.CSS(`#bulk input[name="reason"]`)), chromedp.WaitVisible(chromedp.CSS("#confirm")))
	if got := text("#count"); got != strconv.Itoa(stuckCount) {
		t.Fatalf("the preview counts %q, want %d", got, stuckCount)
	}
	step("type the count's first digit", chromedp.SendKeys(chromedp.CSS("#confirm-count"), "1"))
	if eval(`document.getElementById("execute").disabled`) != true {
		t.Fatal("the execute button is enabled before the count is typed")
	}
	step("type the rest of the count", chromedp.SendKeys(chromedp.CSS("#confirm-count"), strconv.Itoa(stuckCount)[1:]))
	shot("bulk-confirm")
	step("execute", chromedp.Click(chromedp.CSS("#execute")), chromedp.WaitVisible(chromedp.CSS("#outcome")))
	shot("bulk-done")
	if got := text("#outcome"); !strings.Contains(got, fmt.Sprintf("%d applied, 0 moved", stuckCount)) {
		t.Fatalf("the bulk unstick: %q", got)
	}

	// The next delivery of each key runs it once.
	for i := range stuckCount {
		key := consumer.Key(fmt.Sprintf("order-%03d", i))
		if runs := run(t, store, key, `{"order":"`+string(key)+`","charged":true}`, nil); runs != 1 {
			t.Fatalf("%s ran %d times", key, runs)
		}
	}
	step("see them completed", chromedp.Navigate(base+"/records?state=completed&key=order-"), chromedp.WaitVisible(chromedp.CSS("#records")))
	if n := rows(); n != stuckCount {
		t.Fatalf("completed orders: %d, want %d", n, stuckCount)
	}
	step("the record's page", chromedp.Navigate(base+"/record?scope=payments&key=order-003"), chromedp.WaitVisible(chromedp.CSS("#detail")))
	shot("record")
	if got := text("#record-notes"); !strings.Contains(got, "unstick by alice: worker SIGKILLed in the deploy") {
		t.Fatalf("the record's notes: %q", got)
	}
	step("show the stored result", chromedp.Click(chromedp.CSS("#show-result")), chromedp.WaitVisible(chromedp.CSS("#result-text")))
	shot("record-result")
	if got := text("#result-text"); !strings.Contains(got, `"charged":true`) {
		t.Fatalf("the shown result: %q", got)
	}
	step("the failed records", chromedp.Navigate(base+"/records?state=failed"), chromedp.WaitVisible(chromedp.CSS("#records")))
	shot("records-failed")
	step("the replay plans", chromedp.Navigate(base+"/plans"), chromedp.WaitVisible(chromedp.CSS("#plans")))
	shot("plans")
	step("one plan", chromedp.Click(chromedp.CSS("#plans a")), chromedp.WaitVisible(chromedp.CSS("#verdicts")))
	shot("plan")
	step("the overview after", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#actions")))
	shot("overview-after")
	if got := text("#actions"); !strings.Contains(got, "alice\tunstick\tpayments") || !strings.Contains(got, fmt.Sprintf("and %d more\tworker SIGKILLed in the deploy", stuckCount-1)) {
		t.Fatalf("the overview's recent actions, want the bulk unstick of %d records on one line: %q", stuckCount, got)
	}

	// Another origin posts a change form to the UI: refused, nothing changed.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><form id="f" method="post" action="%s/record/unstick">
<input name="scope" value="payments"><input name="key" value="%s"><input name="fence" value="1"><input name="reason" value="csrf">
</form><script>document.getElementById("f").submit()</script>`, base, victim)
	}))
	t.Cleanup(evil.Close)
	step("a cross-origin post", chromedp.Navigate(evil.URL), chromedp.WaitVisible(chromedp.CSS("#message")))
	shot("cross-origin-refused")
	if msg, at := text("#message"), location(); !strings.Contains(msg, "came from another origin") || !strings.HasPrefix(at, base) {
		t.Fatalf("the cross-origin post: %q at %s", msg, at)
	}
	if rec, err := in.Inspect(ctx, "", victim); err != nil || rec.State != "started" || rec.Fence != 1 || len(rec.Notes) != 0 {
		t.Fatalf("the cross-origin post changed %s: %+v, %v", victim, rec, err)
	}
	t.Logf("screenshots in %s", shots)
}

// run executes key once with a handler that returns result or fails with fail,
// and returns how often the handler ran.
func run(t *testing.T, s consumer.Store, key consumer.Key, result string, fail error) int {
	t.Helper()
	var mu sync.Mutex
	runs := 0
	consumer.ExecuteIdempotently(context.Background(), s, key, []byte(key), func(ctx context.Context) (json.RawMessage, error) {
		mu.Lock()
		runs++
		mu.Unlock()
		if fail != nil {
			return nil, fail
		}
		return json.RawMessage(result), nil
	})
	return runs
}

// writePlan writes the plan of a replay of a few orders and invoices into dir,
// as idemkit plan --out does.
func writePlan(t *testing.T, s consumer.Store, dir string) {
	t.Helper()
	var lines []string
	for _, k := range []string{"order-001", "order-002", "invoice-001", "invoice-002", "invoice-003", "refund-007", "order-999", ""} {
		lines = append(lines, fmt.Sprintf(`{"key":%q,"payload":%q}`, k, k)) // the payloads the records were made with
	}
	src := replay.NewJSONL("orders-replay.jsonl", strings.NewReader(strings.Join(lines, "\n")+"\n"))
	p, err := replay.Plan(context.Background(), s, src)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "orders-replay.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}
