package uitest

import (
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/idemkit/idemkit/admin/admintest"
	"github.com/idemkit/idemkit/admin/ui"
	"github.com/idemkit/idemkit/consumer"
)

// hostileKey and hostileError are attacker-controlled text: a key and an error
// message a handler stored.
const (
	hostileKey   = `<script>alert("key")</script>`
	hostileError = `<img src=x onerror=alert(1)> & "card" <b>declined</b>`
)

// raw are the fragments that must never reach a page unescaped.
var raw = []string{"<script>alert", "<img src=x", "<b>declined", `onerror=alert(1)>`}

func noRaw(t *testing.T, what, page string) {
	t.Helper()
	for _, r := range raw {
		if strings.Contains(page, r) {
			t.Errorf("%s holds %q unescaped", what, r)
		}
	}
}

// testHostile: a key of <script> and an error text with HTML are escaped on
// every page that shows them, and the result shown on request too.
func testHostile(t *testing.T, fx admintest.Fixtures) {
	e := newEnv(t, fx, ui.WithActor(alice))
	e.settle(hostileKey, `<script>alert("result")</script>`, nil)
	e.settle("failing", "", consumer.Permanent(errors.New(hostileError)))
	if _, err := e.in.Rerun(t.Context(), adminChange("failing", `<i>because</i>`)); err != nil {
		t.Fatal(err)
	}
	e.settle("failing", "", consumer.Permanent(errors.New(hostileError)))

	pages := map[string]string{
		"overview":           e.get(prefix+"/", http.StatusOK),
		"records":            e.get(prefix+"/records", http.StatusOK),
		"filtered records":   e.get(prefix+"/records?"+url.Values{"key": {hostileKey}}.Encode(), http.StatusOK),
		"record":             e.get(recordPath(hostileKey), http.StatusOK),
		"record with result": e.get(recordPath(hostileKey, "result", "1"), http.StatusOK),
		"failed record":      e.get(recordPath("failing"), http.StatusOK),
		"not found":          e.get(recordPath(`<script>alert("missing")</script>`), http.StatusNotFound),
		"bad filter":         e.get(prefix+"/records?"+url.Values{"state": {`<script>alert("state")</script>`}}.Encode(), http.StatusBadRequest),
		"bulk preview":       e.post(prefix+"/bulk/preview", url.Values{"op": {"forget"}, "key": {"<"}, "reason": {`<script>alert("reason")</script>`}}, http.StatusOK),
		"refused single":     e.post(prefix+"/record/unstick", url.Values{"scope": {Scope}, "key": {hostileKey}, "fence": {"1"}, "reason": {"x"}}, http.StatusConflict),
	}
	for what, page := range pages {
		noRaw(t, what, page)
	}
	if !strings.Contains(pages["records"], "&lt;script&gt;alert(&#34;key&#34;)&lt;/script&gt;") {
		t.Errorf("records: the hostile key is not shown escaped:\n%s", section(t, pages["records"], "records"))
	}
	if n := rows(t, pages["filtered records"], "records"); n != 1 {
		t.Errorf("a key-prefix filter of <script>: %d rows, want 1", n)
	}
	if !strings.Contains(pages["failed record"], "&lt;img src=x onerror=alert(1)&gt; &amp; &#34;card&#34; &lt;b&gt;declined&lt;/b&gt;") {
		t.Errorf("record: the hostile error is not shown escaped")
	}
	if !strings.Contains(pages["failed record"], "&lt;i&gt;because&lt;/i&gt;") {
		t.Errorf("record: the operator's note is not shown escaped")
	}
	if !strings.Contains(pages["record with result"], "&lt;script&gt;alert(") {
		t.Errorf("record: the result is not shown escaped")
	}
	if !strings.Contains(pages["bulk preview"], `&lt;script&gt;alert(&#34;reason&#34;)&lt;/script&gt;`) {
		t.Errorf("bulk preview: the reason is not shown escaped")
	}

	plan := `{"source":"jsonl:/x","scope":"payments","messages":1,"counts":{"NEW":1},"examples":{"NEW":["<script>alert(\"plan\")</script>"]},
		"invalid":[{"key":"<b>declined","partition":"","offset":3,"verdict":"INVALID","error":"<img src=x onerror=alert(1)>"}]}`
	p := newEnv(t, fx, ui.WithPlans(fstest.MapFS{"<b>declined.json": {Data: []byte(plan)}}))
	noRaw(t, "plans", p.get(prefix+"/plans", http.StatusOK))
	page := p.get(prefix+"/plan?"+url.Values{"name": {"<b>declined.json"}}.Encode(), http.StatusOK)
	noRaw(t, "plan", page)
	if !strings.Contains(page, "&lt;script&gt;alert(&#34;plan&#34;)&lt;/script&gt;") {
		t.Errorf("plan: the example key is not shown escaped")
	}
}

// testBounded: a request for a 10,000-record page shows at most 500 records,
// says so, and continues with the store's cursor; the overview of a store
// larger than its sample shows the sample, marked, then the full count made in
// the background, with its age.
func testBounded(t *testing.T, fx admintest.Fixtures) {
	e := newEnv(t, fx, ui.WithSample(100), ui.WithCountEvery(time.Hour))
	ks := keys("many", 1100)
	e.claim(ks)
	page := e.get(prefix+"/records?limit=10000", http.StatusOK)
	if n := rows(t, page, "records"); n != 500 {
		t.Fatalf("a 10,000-record page shows %d records, want 500", n)
	}
	if !strings.Contains(page, "A page shows at most 500 records") || !strings.Contains(page, `id="next"`) {
		t.Errorf("the capped page does not say so or has no next link")
	}
	// Each page shows a record once. A store whose scan may return a record
	// twice (fx.ScanRepeats) may show one on two pages, but fewer than a page of
	// them: a next link that started the listing again would repeat them all.
	seen, pages, repeated := map[string]bool{}, 0, 0
	for page := page; ; page = e.get(hiddenLink(t, page), http.StatusOK) {
		pages++
		for _, k := range ks {
			n := strings.Count(page, ">"+string(k)+"<")
			switch {
			case n > 1:
				t.Errorf("%s is on page %d %d times", k, pages, n)
			case n == 1 && seen[string(k)]:
				repeated++
				if !fx.ScanRepeats {
					t.Errorf("%s is on page %d and on an earlier one", k, pages)
				}
			}
			seen[string(k)] = seen[string(k)] || n > 0
		}
		if !strings.Contains(page, `id="next"`) || pages > len(ks) {
			break
		}
	}
	if repeated > 0 {
		t.Logf("the listing showed %d records on two pages", repeated)
	}
	if pages < 3 || repeated >= 500 {
		t.Errorf("the listing took %d pages and showed %d records again, want 3 or more pages and fewer than 500 again", pages, repeated)
	}
	if len(seen) != len(ks) {
		t.Errorf("paging through the listing found %d of %d records", len(seen), len(ks))
	}

	first := section(t, e.get(prefix+"/", http.StatusOK), "counted")
	if !strings.Contains(first, "Sampled:") || strings.Contains(first, "Full count") || !sampledAtMost(first, 3*100) {
		t.Errorf("the first view of a store larger than the sample:\n%s", first)
	}
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(section(t, e.get(prefix+"/", http.StatusOK), "counted"), "Full count of 1100 records") {
		if time.Now().After(deadline) {
			t.Fatalf("no full count within a minute:\n%s", section(t, e.get(prefix+"/", http.StatusOK), "counted"))
		}
		time.Sleep(20 * time.Millisecond) // polling for the condition, with the deadline above
	}
	if rep := e.store.Begin(t.Context(), []consumer.Claim{{Key: "one-more", Owner: "w", Start: true}})[0]; !rep.Claimed() {
		t.Fatalf("claim: %+v", rep)
	}
	if got := section(t, e.get(prefix+"/", http.StatusOK), "counted"); !strings.Contains(got, "Full count of 1100 records, finished") {
		t.Errorf("a full count younger than WithCountEvery is not shown:\n%s", got)
	}
	if got := section(t, e.get(prefix+"/records?limit=2000&key=one-", http.StatusOK), "records"); !strings.Contains(got, "one-more") {
		t.Errorf("the records page is not live")
	}
	off, err := ui.New(e.in, ui.WithPrefix(prefix), ui.WithSample(100), ui.WithCountEvery(0))
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	e.h = off
	if got := section(t, e.get(prefix+"/", http.StatusOK), "counted"); !strings.Contains(got, "Sampled:") || !strings.Contains(got, "Full counts are off") {
		t.Errorf("background counts are off:\n%s", got)
	}
}

// hiddenLink is the page's next-page link, unescaped.
func hiddenLink(t *testing.T, page string) string {
	t.Helper()
	i := strings.Index(page, `<a href="`)
	for i >= 0 {
		rest := page[i+len(`<a href="`):]
		end := strings.Index(rest, `"`)
		if strings.HasPrefix(rest[end:], `" id="next"`) {
			return strings.ReplaceAll(rest[:end], "&amp;", "&")
		}
		j := strings.Index(rest, `<a href="`)
		if j < 0 {
			break
		}
		i += len(`<a href="`) + j
	}
	t.Fatalf("no next link on the page")
	return ""
}

// sampledAtMost says the overview's count section names a sample of at most n
// records (a view's own count ends at the end of a scan step, so it may read
// somewhat more than its sample).
func sampledAtMost(section string, n int) bool {
	m := regexp.MustCompile(`the first (\d+) records the scan met`).FindStringSubmatch(section)
	if m == nil {
		return false
	}
	got, err := strconv.Atoi(m[1])
	return err == nil && got > 0 && got <= n
}
