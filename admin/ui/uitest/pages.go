package uitest

import (
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/admin/admintest"
	"github.com/idemkit/idemkit/consumer"
)

// csp is the Content-Security-Policy every response must carry.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// testPages: every page renders under the prefix with the security headers, the
// overview counts what is there, the Records filters select exactly, and a
// stored result is shown only when asked for.
func testPages(t *testing.T, fx admintest.Fixtures) {
	e := newEnv(t, fx)
	e.abandon(keys("dead", 3), func(i int) string { return "replica-7-" + string(rune('a'+i)) })
	for _, k := range keys("done", 4) {
		e.settle(k, "secret-result-42", nil)
	}
	e.settle("bad-000", "", consumer.Permanent(errors.New("card declined")))
	e.waitStale(keys("dead", 3)...)

	code, hd, page := e.do(http.MethodGet, prefix+"/", nil, nil)
	if code != http.StatusOK {
		t.Fatalf("overview: %d\n%s", code, page)
	}
	for k, want := range map[string]string{"Content-Security-Policy": csp, "X-Content-Type-Options": "nosniff",
		"Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store", "X-Frame-Options": "DENY"} {
		if got := hd.Get(k); got != want {
			t.Errorf("overview header %s: %q, want %q", k, got, want)
		}
	}
	aligned(t, page, "counts")
	counts := section(t, page, "counts")
	for _, want := range []string{"<td>payments</td>", ">3</a>", ">4</a>", ">1</a>", `<td class="num">8</td>`} {
		if !strings.Contains(counts, want) {
			t.Errorf("overview counts lack %q:\n%s", want, counts)
		}
	}
	if s := section(t, page, "stale"); !strings.Contains(s, ">3</a>") {
		t.Errorf("overview: lease ran out is not 3:\n%s", s)
	}
	if s := section(t, page, "failed"); !strings.Contains(s, "permanent</a>: 1") || !strings.Contains(s, "exhausted</a>: 0") {
		t.Errorf("overview: failed by kind:\n%s", s)
	}
	if s := section(t, page, "oldest"); !strings.Contains(s, "dead-00") || !strings.Contains(s, "replica-7-") {
		t.Errorf("overview: oldest started:\n%s", s)
	}
	if !strings.Contains(page, `data-refresh="15"`) || !strings.Contains(page, `src="`+prefix+`/static/ui.js"`) {
		t.Errorf("overview: no auto-refresh or script under the prefix")
	}
	if strings.Contains(page, "<script>") || strings.Contains(page, " style=") || strings.Contains(page, " onclick") {
		t.Errorf("overview: inline script or style")
	}

	cases := []struct {
		query string
		want  int
	}{
		{"", 8},
		{"?stale=1", 3},
		{"?state=completed", 4},
		{"?kind=permanent", 1},
		{"?kind=exhausted", 0},
		{"?owner=replica-7-b", 1},
		{"?key=done-", 4},
		{"?scope=" + Scope + "&state=started&older=0s", 3},
		{"?scope=elsewhere", 0},
	}
	for _, c := range cases {
		page := e.get(prefix+"/records"+c.query, http.StatusOK)
		if n := rows(t, page, "records"); n != c.want {
			t.Errorf("records%s: %d rows, want %d", c.query, n, c.want)
		}
		if c.want > 0 {
			aligned(t, page, "records")
		}
		if c.query == "?stale=1" && strings.Count(section(t, page, "records"), "started*") != 3 {
			t.Errorf("records%s: the lease-ran-out mark is missing", c.query)
		}
	}
	if page := e.get(prefix+"/records", http.StatusOK); !strings.Contains(page, "the lease ran out") {
		t.Error("records: the lease-ran-out mark is not explained")
	}
	for _, bad := range []string{"?state=stuck", "?older=yesterday", "?kind=flaky", "?limit=0", "?limit=x"} {
		e.get(prefix+"/records"+bad, http.StatusBadRequest)
	}

	page = e.get(recordPath("done-000"), http.StatusOK)
	if strings.Contains(page, "secret-result-42") || !strings.Contains(page, "Show the stored result") {
		t.Errorf("record: the stored result is shown unasked")
	}
	for _, want := range []string{"completed", "fingerprint", "Error history", "Operator notes"} {
		if !strings.Contains(page, want) {
			t.Errorf("record page lacks %q", want)
		}
	}
	if page := e.get(recordPath("done-000", "result", "1"), http.StatusOK); !strings.Contains(section(t, page, "result-text"), "secret-result-42") {
		t.Errorf("record: the stored result is not shown when asked")
	}
	if page := e.get(recordPath("dead-001"), http.StatusOK); !strings.Contains(page, "lease ran out: the next delivery takes it over") {
		t.Errorf("record: a stale claim is not marked")
	}
	e.get(recordPath("nothing-here"), http.StatusNotFound)
	e.get(prefix+"/record?key=", http.StatusBadRequest)

	if code, hd, body := e.do(http.MethodGet, prefix+"/robots.txt", nil, nil); code != 200 || body != "User-agent: *\nDisallow: /\n" || hd.Get("Content-Security-Policy") != csp {
		t.Errorf("robots.txt: %d %q", code, body)
	}
	if _, _, css := e.do(http.MethodGet, prefix+"/static/ui.css", nil, nil); !regexp.MustCompile(`th\.num, td\.num \{ text-align: right;`).MatchString(css) {
		t.Errorf("ui.css does not right-align numbers' headers with their numbers:\n%s", css)
	}
	for path, ctype := range map[string]string{"/static/ui.js": "text/javascript; charset=utf-8", "/static/ui.css": "text/css; charset=utf-8"} {
		if code, hd, _ := e.do(http.MethodGet, prefix+path, nil, nil); code != 200 || hd.Get("Content-Type") != ctype {
			t.Errorf("%s: %d %q", path, code, hd.Get("Content-Type"))
		}
	}
	if code, hd, _ := e.do(http.MethodGet, prefix, nil, nil); code != http.StatusMovedPermanently || hd.Get("Location") != prefix+"/" {
		t.Errorf("%s: %d to %q", prefix, code, hd.Get("Location"))
	}
	for _, p := range []string{"/elsewhere/", prefix + "/nothing", prefix + "/static/", prefix + "/static/../handler.go"} {
		if code, _, body := e.do(http.MethodGet, p, nil, nil); code == http.StatusOK || strings.Contains(body, "package ui") {
			t.Errorf("GET %s: %d", p, code)
		}
	}
	if page := e.get(prefix+"/plans", http.StatusOK); !strings.Contains(page, "No plan directory was given") {
		t.Errorf("plans without a directory:\n%s", page)
	}
}
