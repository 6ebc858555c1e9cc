package uitest

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/admin/admintest"
	"github.com/idemkit/idemkit/admin/ui"
	"github.com/idemkit/idemkit/consumer"
)

func adminChange(key consumer.Key, reason string) admin.Change {
	return admin.Change{Scope: Scope, Key: key, Actor: "bob", Reason: reason}
}

// hasNote reports whether rec's newest operator note is text.
func hasNote(rec admin.Record, text string) bool {
	return len(rec.Notes) > 0 && rec.Notes[0].Text == text
}

// testReadOnly: without an actor function there are no action forms, and every
// change request is refused and changes nothing.
func testReadOnly(t *testing.T, fx admintest.Fixtures) {
	e := newEnv(t, fx)
	denied := newEnv(t, fx, ui.WithActor(func(*http.Request) (string, error) { return "", errors.New("sign in first") }))
	for _, x := range []*env{e, denied} {
		x.abandon([]consumer.Key{"stuck"}, func(int) string { return "gone" })
	}
	e.waitStale("stuck")
	denied.waitStale("stuck")
	for _, path := range []string{recordPath("stuck"), prefix + "/records"} {
		if page := e.get(path, http.StatusOK); strings.Contains(page, `method="post"`) || !strings.Contains(page, "read-only") {
			t.Errorf("%s: a read-only UI shows an action form", path)
		}
	}
	fence := strconv.FormatInt(e.record("stuck").Fence, 10)
	for _, path := range []string{"/record/unstick", "/record/forget", "/bulk/preview", "/bulk/execute"} {
		page := e.post(prefix+path, url.Values{"scope": {Scope}, "key": {"stuck"}, "fence": {fence}, "reason": {"r"}, "op": {"unstick"},
			"count": {"1"}, "confirm": {"1"}}, http.StatusForbidden)
		if !strings.Contains(page, "read-only") {
			t.Errorf("POST %s: the refusal does not say why:\n%s", path, page)
		}
	}
	if rec := e.record("stuck"); rec.State != "started" || rec.Fence != 1 || len(rec.Notes) != 0 {
		t.Errorf("a read-only UI changed the record: %+v", rec)
	}
	page := denied.post(prefix+"/record/unstick", url.Values{"scope": {Scope}, "key": {"stuck"}, "fence": {"1"}, "reason": {"r"}}, http.StatusForbidden)
	if !strings.Contains(page, "sign in first") || denied.record("stuck").State != "started" {
		t.Errorf("an actor function's refusal: %s", page)
	}
}

// testSingle: unstick, forget and rerun one record from its page, each at the
// fence the page showed; a record that moved is refused with a clear message.
func testSingle(t *testing.T, fx admintest.Fixtures) {
	e := newEnv(t, fx, ui.WithActor(alice))
	e.abandon([]consumer.Key{"stuck", "moving"}, func(i int) string { return "replica-7-" + strconv.Itoa(i) })
	e.settle("done", "ok", nil)
	e.settle("bad", "", consumer.Permanent(errors.New("card declined")))
	e.waitStale("stuck", "moving")

	page := e.get(recordPath("stuck"), http.StatusOK)
	for _, id := range []string{"act-unstick", "act-forget"} {
		if !strings.Contains(page, `id="`+id+`"`) {
			t.Errorf("the page of a started record has no %s form", id)
		}
	}
	if strings.Contains(page, `id="act-rerun"`) {
		t.Errorf("the page of a started record offers rerun")
	}
	form := url.Values{"scope": {Scope}, "key": {"stuck"}, "fence": {hidden(t, page, "fence")}}
	e.post(prefix+"/record/unstick", form, http.StatusBadRequest) // no reason
	if rec := e.record("stuck"); rec.State != "started" {
		t.Fatalf("a change without a reason was made: %+v", rec)
	}
	noFence := url.Values{"scope": {Scope}, "key": {"stuck"}, "reason": {"r"}}
	e.post(prefix+"/record/unstick", noFence, http.StatusBadRequest)
	form.Set("reason", "replica-7 was killed")
	done := e.post(prefix+"/record/unstick", form, http.StatusOK)
	if !strings.Contains(done, "started → retry, fence 1 → 2") {
		t.Errorf("unstick: %s", section(t, done, "outcome"))
	}
	if rec := e.record("stuck"); rec.State != "retry" || rec.Fence != 2 || !hasNote(rec, "unstick by alice: replica-7 was killed") {
		t.Errorf("after unstick: %+v", rec)
	}
	// The same form again: the record moved on (fence 2 now).
	refused := e.post(prefix+"/record/unstick", form, http.StatusConflict)
	if !strings.Contains(refused, "the record moved since you looked at it. You saw fence 1; it holds fence 2 now") {
		t.Errorf("a moved record's refusal:\n%s", refused)
	}

	// The page shows fence 1, then someone else unsticks the record: the form is refused.
	page = e.get(recordPath("moving"), http.StatusOK)
	if _, err := e.in.Unstick(t.Context(), adminChange("moving", "bob was faster")); err != nil {
		t.Fatal(err)
	}
	moved := url.Values{"scope": {Scope}, "key": {"moving"}, "fence": {hidden(t, page, "fence")}, "reason": {"r"}}
	e.post(prefix+"/record/forget", moved, http.StatusConflict)
	if rec := e.record("moving"); rec.State != "retry" || rec.Fence != 2 || len(rec.Notes) != 1 {
		t.Errorf("a refused forget changed the record: %+v", rec)
	}

	page = e.get(recordPath("done"), http.StatusOK)
	e.post(prefix+"/record/unstick", url.Values{"scope": {Scope}, "key": {"done"}, "fence": {hidden(t, page, "fence")}, "reason": {"r"}}, http.StatusConflict)
	e.post(prefix+"/record/forget", url.Values{"scope": {Scope}, "key": {"done"}, "fence": {hidden(t, page, "fence")}, "reason": {"re-encoded"}}, http.StatusOK)
	if rec := e.record("done"); rec.State != "forgotten" || !hasNote(rec, "forget by alice: re-encoded") {
		t.Errorf("after forget: %+v", rec)
	}
	page = e.get(recordPath("bad"), http.StatusOK)
	e.post(prefix+"/record/rerun", url.Values{"scope": {Scope}, "key": {"bad"}, "fence": {hidden(t, page, "fence")}, "reason": {"card fixed"}}, http.StatusOK)
	if rec := e.record("bad"); rec.State != "retry" || !hasNote(rec, "rerun by alice: card fixed") {
		t.Errorf("after rerun: %+v", rec)
	}
	e.post(prefix+"/record/explode", url.Values{"scope": {Scope}, "key": {"bad"}, "fence": {"1"}, "reason": {"r"}}, http.StatusNotFound)

	// The overview's recent actions are the records' notes, read from the store:
	// bob's, made with the operator API, too. The refused ones changed nothing.
	overview := e.get(prefix+"/", http.StatusOK)
	acts := section(t, overview, "actions")
	if n := rows(t, overview, "actions"); n != 4 {
		t.Errorf("the overview lists %d recent actions, want the 4 applied:\n%s", n, acts)
	}
	for _, want := range []string{
		"<td>alice</td><td>unstick</td><td>" + Scope + "</td>", ">stuck</a></td><td>replica-7 was killed</td>",
		"<td>bob</td><td>unstick</td>", ">moving</a></td><td>bob was faster</td>",
		"<td>alice</td><td>forget</td>", ">done</a></td><td>re-encoded</td>",
		"<td>alice</td><td>rerun</td>", ">bad</a></td><td>card fixed</td>",
	} {
		if !strings.Contains(acts, want) {
			t.Errorf("the overview's recent actions lack %q:\n%s", want, acts)
		}
	}
	if strings.Contains(acts, `class="here"`) || !strings.Contains(section(t, overview, "actions-rule"), "Every record was read for this view") {
		t.Errorf("the overview read every record and still marks an action as not read back:\n%s", section(t, overview, "actions"))
	}
}

// bob is an actor function that names bob.
func bob(*http.Request) (string, error) { return "bob", nil }

// other is a second handler over e's store, with an inspector of its own: it
// shares nothing with e's but the store, as another UI process would.
func (e *env) other(opts ...ui.Option) *env {
	e.t.Helper()
	in, err := admin.New(e.store)
	if err != nil {
		e.t.Fatal(err)
	}
	h, err := ui.New(in, append([]ui.Option{ui.WithPrefix(prefix)}, opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = h.Close() })
	return &env{t: e.t, store: e.store, in: in, h: h}
}

// act makes op on key through the record's page, with reason.
func (e *env) act(op string, key consumer.Key, reason string) {
	e.t.Helper()
	page := e.get(recordPath(key), http.StatusOK)
	e.post(prefix+"/record/"+op, url.Values{"scope": {Scope}, "key": {string(key)}, "fence": {hidden(e.t, page, "fence")}, "reason": {reason}}, http.StatusOK)
}

// bulk previews op on the records filter selects and executes it, and returns
// how many records it changed.
func (e *env) bulk(op string, filter url.Values, reason string) string {
	e.t.Helper()
	v := url.Values{"op": {op}, "reason": {reason}}
	for k, vs := range filter {
		v[k] = vs
	}
	preview := e.post(prefix+"/bulk/preview", v, http.StatusOK)
	v.Set("count", hidden(e.t, preview, "count"))
	v.Set("digest", hidden(e.t, preview, "digest"))
	v.Set("confirm", hidden(e.t, preview, "count"))
	return section(e.t, e.post(prefix+"/bulk/execute", v, http.StatusOK), "outcome")
}

// actions is the overview's recent actions.
func (e *env) actions() string {
	e.t.Helper()
	return section(e.t, e.get(prefix+"/", http.StatusOK), "actions")
}

// eventually polls cond until it holds, for at most a minute.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
		time.Sleep(20 * time.Millisecond) // polling for the condition, with the deadline above
	}
}

// testSharedActions: the overview's recent actions are read from the store, so
// an action made through one handler shows on another over the same store, as
// one made by another UI process or idemkit does, once the count it shows has
// read it; a handler shows its own actions at once, marked, until then; and
// every action is one line, a bulk action's too.
func testSharedActions(t *testing.T, fx admintest.Fixtures) {
	a := newEnv(t, fx, ui.WithActor(alice))
	b := a.other(ui.WithActor(bob))
	a.abandon(keys("stuck", 4), func(i int) string { return "replica-7-" + strconv.Itoa(i) })
	// The second store's records are made while the first one's leases run out.
	big := newEnv(t, fx, ui.WithActor(alice), ui.WithSample(5), ui.WithCountEvery(time.Hour))
	big.claim(keys("many", 1100))
	big.abandon(keys("big", 12), func(i int) string { return "replica-8-" + strconv.Itoa(i) })
	counting := big.other(ui.WithSample(5), ui.WithCountEvery(time.Millisecond)) // counts anew at every view
	a.waitStale(keys("stuck", 4)...)

	// A store no larger than the sample is read whole by every view.
	a.act("unstick", "stuck-000", "replica-7 is gone")
	one := ">stuck-000</a></td><td>replica-7 is gone</td>"
	if acts := b.actions(); !strings.Contains(acts, "<td>alice</td><td>unstick</td>") || !strings.Contains(acts, one) {
		t.Errorf("an unstick through one handler is not on the other's overview:\n%s", acts)
	}
	if got := b.bulk("unstick", url.Values{"key": {"stuck-"}, "stale": {"1"}}, "the rest of replica-7"); !strings.Contains(got, "<strong>3 applied</strong>") {
		t.Fatalf("bulk unstick: %s", got)
	}
	acts := a.actions()
	if n := rows(t, acts, "actions"); n != 2 || !strings.Contains(acts, "<td>bob</td><td>unstick</td>") ||
		!strings.Contains(acts, "</a> and 2 more</td><td>the rest of replica-7</td>") || strings.Contains(acts, `class="here"`) {
		t.Errorf("a bulk unstick of 3 through one handler on the other's overview, want one line of 3 records beside the single one:\n%s", acts)
	}

	// A store larger than the sample: a view shows the newest full count, which
	// reads a change only if it began after it.
	big.waitStale(keys("big", 12)...)
	for _, e := range []*env{big, counting} {
		eventually(t, "a full count of 1112 records", func() bool {
			return strings.Contains(section(t, e.get(prefix+"/", http.StatusOK), "counted"), "Full count of 1112 records")
		})
	}
	big.act("unstick", "big-000", "replica-8 is gone")
	mine := big.actions()
	if n := strings.Count(mine, "replica-8 is gone"); n != 1 || !strings.Contains(mine, `<tr class="here"><td>`) ||
		!strings.Contains(mine, ">big-000</a></td><td>replica-8 is gone</td>") {
		t.Errorf("a handler's own unstick, made after its full count, is not listed once, marked:\n%s", mine)
	}
	if rule := section(t, big.get(prefix+"/", http.StatusOK), "actions-rule"); !strings.Contains(rule, "full count") || !strings.Contains(rule, "marked *") {
		t.Errorf("the overview does not say where its recent actions come from:\n%s", rule)
	}
	eventually(t, "the other handler's next full count reads the unstick", func() bool {
		return strings.Contains(counting.actions(), ">big-000</a></td><td>replica-8 is gone</td>")
	})
	if got := big.bulk("unstick", url.Values{"key": {"big-"}, "stale": {"1"}}, "the rest of replica-8"); !strings.Contains(got, "<strong>11 applied</strong>") {
		t.Fatalf("bulk unstick: %s", got)
	}
	mine = big.actions()
	if n := strings.Count(mine, "the rest of replica-8"); n != 1 || !strings.Contains(mine, "</a> and 10 more</td><td>the rest of replica-8</td>") {
		t.Errorf("a handler's own bulk unstick of 11 is not one marked line:\n%s", mine)
	}
	eventually(t, "the other handler's next full count reads the bulk unstick", func() bool {
		acts := counting.actions()
		return strings.Contains(acts, "</a> and 10 more</td><td>the rest of replica-8</td>") && !strings.Contains(acts, `class="here"`)
	})

	// Full counts off: a view reads its sample only, so a handler's own change
	// shows from memory unless the sample holds it, and once either way.
	sampled := big.other(ui.WithActor(alice), ui.WithSample(5), ui.WithCountEvery(0))
	for i, k := range keys("big", 12) {
		sampled.act("forget", k, "forget "+strconv.Itoa(i)+" now")
	}
	acts = sampled.actions()
	for i := range 12 {
		if n := strings.Count(acts, ">forget "+strconv.Itoa(i)+" now<"); n != 1 {
			t.Errorf("forget %d is listed %d times on a sampled overview, want once:\n%s", i, n, acts)
		}
	}
}

// testChangesNeedScope: a UI that changes records refuses a store left on the
// default scope, saying what to do; a read-only one takes any store.
func testChangesNeedScope(t *testing.T, fx admintest.Fixtures) {
	s, err := fx.New(t)
	if err != nil {
		t.Fatalf("new store: %v", err)
	}
	in, err := admin.New(s)
	if err != nil {
		t.Fatal(err)
	}
	if h, err := ui.New(in, ui.WithPrefix(prefix), ui.WithActor(alice)); !errors.Is(err, consumer.ErrDefaultScope) ||
		!strings.Contains(err.Error(), "consumer.WithScope(") || !strings.Contains(err.Error(), "leave WithActor out for a read-only UI") {
		if h != nil {
			_ = h.Close()
		}
		t.Fatalf("ui.New with WithActor on a store on the default scope: %v", err)
	}
	h, err := ui.New(in, ui.WithPrefix(prefix))
	if err != nil {
		t.Fatalf("a read-only UI on a store on the default scope: %v", err)
	}
	_ = h.Close()
}

// testBulk: a bulk unstick by the current filter is previewed, needs its count
// typed, is refused when the records moved since the preview, and then changes
// exactly the records it showed.
func testBulk(t *testing.T, fx admintest.Fixtures) {
	e := newEnv(t, fx, ui.WithActor(alice))
	dead := keys("dead", 5)
	e.abandon(dead, func(i int) string { return "replica-7-" + strconv.Itoa(i) })
	e.abandon(keys("other", 2), func(i int) string { return "replica-8-" + strconv.Itoa(i) })
	small := newEnv(t, fx, ui.WithActor(alice), ui.WithBulkMax(2))
	small.abandon(keys("dead", 3), func(i int) string { return "replica-7-" + strconv.Itoa(i) })
	e.settle("done", "ok", nil)
	e.waitStale(append(keys("other", 2), dead...)...)

	list := e.get(prefix+"/records?owner=replica-7-&stale=1", http.StatusOK)
	if n := rows(t, list, "records"); n != 5 {
		t.Fatalf("the filter selects %d records, want 5", n)
	}
	bulk := section(t, list, "bulk")
	if hidden(t, bulk, "owner") != "replica-7-" || hidden(t, bulk, "stale") != "1" {
		t.Fatalf("the bulk form does not carry the filter:\n%s", bulk)
	}
	filter := url.Values{"owner": {"replica-7-"}, "stale": {"1"}, "op": {"unstick"}, "reason": {"replica-7 was SIGKILLed"}}
	noReason := url.Values{"owner": {"replica-7-"}, "stale": {"1"}, "op": {"unstick"}}
	e.post(prefix+"/bulk/preview", noReason, http.StatusBadRequest)
	preview := e.post(prefix+"/bulk/preview", filter, http.StatusOK)
	if got := section(t, preview, "count"); !strings.Contains(got, ">5</") {
		t.Fatalf("preview count: %s", got)
	}
	if n := rows(t, preview, "sample"); n != 5 {
		t.Errorf("preview sample: %d rows", n)
	}
	aligned(t, preview, "sample")
	confirm := func(page, typed string) url.Values {
		v := url.Values{}
		for k, vs := range filter {
			v[k] = vs
		}
		v.Set("count", hidden(t, page, "count"))
		v.Set("digest", hidden(t, page, "digest"))
		v.Set("confirm", typed)
		return v
	}
	unchanged := func(what string, want int) {
		t.Helper()
		n := 0
		for _, k := range dead {
			if e.record(k).State == "started" {
				n++
			}
		}
		if n != want {
			t.Fatalf("%s: %d of the dead claims are still started, want %d", what, n, want)
		}
	}
	for _, typed := range []string{"", "4", "five", "50"} {
		e.post(prefix+"/bulk/execute", confirm(preview, typed), http.StatusBadRequest)
	}
	unchanged("a wrong confirmation", 5)

	// A takeover between the preview and the execution: the same count, another fence.
	if rep := e.store.Begin(t.Context(), []consumer.Claim{{Key: dead[0], Owner: "replica-7-again", Fingerprint: consumer.FingerprintOf([]byte(dead[0])), Start: true}})[0]; rep.Fence != 2 {
		t.Fatalf("takeover: %+v", rep)
	}
	e.waitStale(dead[0])
	refused := e.post(prefix+"/bulk/execute", confirm(preview, "5"), http.StatusConflict)
	if !strings.Contains(section(t, refused, "refused"), "not the same records at the same fences") {
		t.Errorf("a moved record's refusal:\n%s", refused)
	}
	unchanged("a plan whose fences moved", 5)

	// One record unstuck by someone else: the count differs.
	if _, err := e.in.Unstick(t.Context(), adminChange(dead[4], "bob")); err != nil {
		t.Fatal(err)
	}
	refused = e.post(prefix+"/bulk/execute", confirm(preview, "5"), http.StatusConflict)
	if !strings.Contains(section(t, refused, "refused"), "you confirmed 5 records, and 4 match now") {
		t.Errorf("a changed count's refusal:\n%s", refused)
	}
	unchanged("a plan whose count moved", 4)

	preview = e.post(prefix+"/bulk/preview", filter, http.StatusOK)
	done := e.post(prefix+"/bulk/execute", confirm(preview, "4"), http.StatusOK)
	if !strings.Contains(section(t, done, "outcome"), "4 planned: <strong>4 applied</strong>, 0 moved") {
		t.Errorf("bulk execute: %s", section(t, done, "outcome"))
	}
	unchanged("the bulk unstick", 0)
	for _, k := range dead[:4] {
		if rec := e.record(k); rec.State != "retry" || !hasNote(rec, "unstick by alice: replica-7 was SIGKILLed") {
			t.Errorf("%s after the bulk unstick: %+v", k, rec)
		}
	}
	for _, k := range keys("other", 2) {
		if rec := e.record(k); rec.State != "started" {
			t.Errorf("%s (another replica) was changed: %+v", k, rec)
		}
	}
	// Execute the same confirmation again: nothing matches now.
	e.post(prefix+"/bulk/execute", confirm(preview, "4"), http.StatusConflict)

	// An action the filter's state does not allow says what to change.
	bad := e.post(prefix+"/bulk/preview", url.Values{"state": {"completed"}, "op": {"unstick"}, "reason": {"r"}}, http.StatusBadRequest)
	if !strings.Contains(bad, "unstick changes only records in state started") {
		t.Errorf("a bulk unstick of completed records:\n%s", bad)
	}
	// More than the maximum: shown, not offered.
	small.waitStale(keys("dead", 3)...)
	page := small.post(prefix+"/bulk/preview", filter, http.StatusOK)
	if !strings.Contains(page, "more than the 2 one action may change") || strings.Contains(page, `id="confirm"`) {
		t.Errorf("a bulk action over the maximum:\n%s", page)
	}
}

// testCrossOrigin: a change request from another origin is refused, whatever it
// carries, and changes nothing; the same request from the UI's own origin works.
func testCrossOrigin(t *testing.T, fx admintest.Fixtures) {
	e := newEnv(t, fx, ui.WithActor(alice))
	e.dead([]consumer.Key{"stuck"}, func(int) string { return "gone" })
	form := url.Values{"scope": {Scope}, "key": {"stuck"}, "fence": {"1"}, "reason": {"csrf"}}
	for _, hd := range []map[string]string{
		{"Sec-Fetch-Site": "cross-site"},
		{"Sec-Fetch-Site": "same-site"},
		{"Origin": "http://evil.example"},
	} {
		code, _, page := e.do(http.MethodPost, prefix+"/record/unstick", form, hd)
		if code != http.StatusForbidden || !strings.Contains(page, "came from another origin") {
			t.Errorf("POST with %v: %d\n%s", hd, code, page)
		}
	}
	if rec := e.record("stuck"); rec.State != "started" || len(rec.Notes) != 0 {
		t.Fatalf("a cross-origin request changed the record: %+v", rec)
	}
	code, _, _ := e.do(http.MethodPost, prefix+"/record/unstick", form, map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://ui.example"})
	if code != http.StatusOK || e.record("stuck").State != "retry" {
		t.Errorf("a same-origin request: %d", code)
	}
}

// testPlans: the plan files of the plan directory are listed and shown, and
// nothing outside it is read.
func testPlans(t *testing.T, fx admintest.Fixtures) {
	plan := `{"source":"jsonl:/var/orders.jsonl","scope":"payments","messages":7,"counts":{"NEW":3,"DUPLICATE":2,"INVALID":2},
		"examples":{"NEW":["k1","k2"]},"invalid":[{"key":"","partition":"","offset":4,"verdict":"INVALID","error":"no key"}],
		"retention_ns":86400000000000,"beyond_retention":1,"beyond_retention_new":1}`
	e := newEnv(t, fx, ui.WithPlans(fstest.MapFS{"orders.json": {Data: []byte(plan)}, "notes.txt": {Data: []byte("x")},
		"broken.json": {Data: []byte("{")}, "sub/inner.json": {Data: []byte(plan)}}))
	list := e.get(prefix+"/plans", http.StatusOK)
	if n := rows(t, list, "plans"); n != 2 || !strings.Contains(list, "orders.json") || strings.Contains(list, "notes.txt") {
		t.Errorf("plans: %d listed\n%s", n, section(t, list, "plans"))
	}
	aligned(t, list, "plans")
	page := e.get(prefix+"/plan?name=orders.json", http.StatusOK)
	aligned(t, page, "verdicts")
	for _, want := range []string{"jsonl:/var/orders.jsonl", "7 messages", "<td>NEW</td><td class=\"num\">3</td>", "k1", "no key", "older than the 24h0m0s retention"} {
		if !strings.Contains(page, want) {
			t.Errorf("plan page lacks %q", want)
		}
	}
	if strings.Contains(page, `method="post"`) {
		t.Errorf("the plan page offers an action")
	}
	e.get(prefix+"/plan?name=broken.json", http.StatusBadRequest)
	e.get(prefix+"/plan?name=missing.json", http.StatusNotFound)
	for _, name := range []string{"../orders.json", "sub/inner.json", "/etc/passwd", "notes.txt"} {
		e.get(prefix+"/plan?"+url.Values{"name": {name}}.Encode(), http.StatusBadRequest)
	}
}
