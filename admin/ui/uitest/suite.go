// Package uitest runs the operator UI's handler tests (package ui) on any store
// with the operator SPI: every page, every action (one and bulk), the fence
// precondition, the cross-origin refusal, the read-only mode and hostile record
// text, the recent actions read from the store by every handler over it, the
// refusal of changes on the default scope. Each store's tests run it with the same fixtures as the operator
// conformance suite:
//
//	func TestUI(t *testing.T) {
//		uitest.Run(t, admintest.Fixtures{New: ...})
//	}
//
// It drives the handler in process (net/http/httptest); the counts it checks are
// exact.
package uitest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/admin/admintest"
	"github.com/idemkit/idemkit/admin/ui"
	"github.com/idemkit/idemkit/consumer"
)

// Run runs every section as a subtest of t, each on a fresh store fx.New makes.
func Run(t *testing.T, fx admintest.Fixtures) {
	if fx.New == nil {
		t.Fatal("uitest: Fixtures.New is nil: give a factory of fresh stores")
	}
	tests := []struct {
		name string
		fn   func(*testing.T, admintest.Fixtures)
	}{
		{"Pages", testPages},
		{"HostileTextIsEscaped", testHostile},
		{"PageIsBounded", testBounded},
		{"ReadOnly", testReadOnly},
		{"SingleActions", testSingle},
		{"BulkActions", testBulk},
		{"SharedActions", testSharedActions},
		{"ChangesNeedScope", testChangesNeedScope},
		{"CrossOriginRefused", testCrossOrigin},
		{"Plans", testPlans},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, fx) })
	}
}

// Scope is the scope every section's records are in.
const Scope = "payments"

// lease is the lease of every claim the sections make. A key a section settles
// is claimed, run and completed under it, and a claim answered later than the
// lease less its margin cannot be used, so it is seconds long: a busy machine's
// store round trip fits in it many times over. The claims of dead workers
// (abandon) are left to run out, and waitStale waits until they have.
const lease = 2 * time.Second

// env is one section's store, inspector and handler.
type env struct {
	t     *testing.T
	store admintest.Store
	in    *admin.Inspector
	h     *ui.Handler
}

const prefix = "/ops/idemkit"

// newEnv makes a fresh store and a handler on it under prefix, with opts.
func newEnv(t *testing.T, fx admintest.Fixtures, opts ...ui.Option) *env {
	t.Helper()
	s, err := fx.New(t, consumer.WithScope(Scope), consumer.WithLease(lease))
	if err != nil {
		t.Fatalf("new store: %v", err)
	}
	in, err := admin.New(s)
	if err != nil {
		t.Fatal(err)
	}
	h, err := ui.New(in, append([]ui.Option{ui.WithPrefix(prefix)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return &env{t: t, store: s, in: in, h: h}
}

// alice is an actor function that names alice.
func alice(*http.Request) (string, error) { return "alice", nil }

// dead leaves keys started by owners that never come back (owner(i)), and waits
// until their leases have run out.
func (e *env) dead(keys []consumer.Key, owner func(i int) string) {
	e.t.Helper()
	e.abandon(keys, owner)
	e.waitStale(keys...)
}

// abandon leaves keys started by owners that never come back (owner(i)); their
// leases run out a lease later (waitStale waits for that), so a section makes
// its other records meanwhile.
func (e *env) abandon(keys []consumer.Key, owner func(i int) string) {
	e.t.Helper()
	claims := make([]consumer.Claim, len(keys))
	for i, k := range keys {
		claims[i] = consumer.Claim{Key: k, Owner: owner(i), Fingerprint: consumer.FingerprintOf([]byte(k)), Start: true}
	}
	for i, rep := range e.store.Begin(context.Background(), claims) {
		if !rep.Claimed() {
			e.t.Fatalf("claim %s: %+v", keys[i], rep)
		}
	}
}

// claim starts keys, owned by w, in batches of 100: more records than one scan
// step reads make a store larger than a small sample.
func (e *env) claim(keys []consumer.Key) {
	e.t.Helper()
	claims := make([]consumer.Claim, len(keys))
	for i, k := range keys {
		claims[i] = consumer.Claim{Key: k, Owner: "w", Start: true}
	}
	for start := 0; start < len(claims); start += 100 {
		for i, rep := range e.store.Begin(context.Background(), claims[start:min(start+100, len(claims))]) {
			if !rep.Claimed() {
				e.t.Fatalf("claim %s: %+v", keys[start+i], rep)
			}
		}
	}
}

// waitStale waits until every key's lease has run out: it sleeps for what the
// store says a lease has left, then reads the record again.
func (e *env) waitStale(keys ...consumer.Key) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, k := range keys {
		for {
			rec, err := e.in.Inspect(context.Background(), "", k)
			if err != nil {
				e.t.Fatal(err)
			}
			if rec.Stale() {
				break
			}
			if rec.State != "started" {
				e.t.Fatalf("waiting for the lease of %s to run out, it is not started: %+v", k, rec)
			}
			if time.Now().After(deadline) {
				e.t.Fatalf("the lease of %s did not run out in 30s: %+v", k, rec)
			}
			// polling for the condition, with the deadline above
			time.Sleep(max(rec.LeaseLeft, 10*time.Millisecond))
		}
	}
}

// settle runs key to completion (fail == nil, the result result) or failure.
func (e *env) settle(key consumer.Key, result string, fail error) {
	e.t.Helper()
	runs := 0
	res := consumer.ExecuteIdempotently(context.Background(), e.store, key, []byte(key), func(ctx context.Context) (string, error) {
		runs++
		return result, fail
	})
	if runs != 1 {
		e.t.Fatalf("%s: the handler ran %d times, %+v", key, runs, res)
	}
}

func (e *env) record(key consumer.Key) admin.Record {
	e.t.Helper()
	rec, err := e.in.Inspect(context.Background(), "", key)
	if err != nil {
		e.t.Fatalf("inspect %s: %v", key, err)
	}
	return rec
}

// do sends one request to the handler and returns its status, headers and body.
func (e *env) do(method, path string, form url.Values, header map[string]string) (int, http.Header, string) {
	e.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req := httptest.NewRequest(method, "http://ui.example"+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	return rec.Code, rec.Header(), rec.Body.String()
}

// get requests path and fails the test unless it answers want.
func (e *env) get(path string, want int) string {
	e.t.Helper()
	code, _, body := e.do(http.MethodGet, path, nil, nil)
	if code != want {
		e.t.Fatalf("GET %s: status %d, want %d:\n%s", path, code, want, body)
	}
	return body
}

// post sends form to path and fails the test unless it answers want.
func (e *env) post(path string, form url.Values, want int) string {
	e.t.Helper()
	code, _, body := e.do(http.MethodPost, path, form, nil)
	if code != want {
		e.t.Fatalf("POST %s: status %d, want %d:\n%s", path, code, want, body)
	}
	return body
}

// section is the element with id on page, up to the first closing tag of its
// kind.
func section(t *testing.T, page, id string) string {
	t.Helper()
	i := strings.Index(page, `id="`+id+`"`)
	if i < 0 {
		t.Fatalf("the page has no element %q:\n%s", id, page)
	}
	open := strings.LastIndex(page[:i], "<")
	tag := strings.Fields(page[open+1 : i])[0]
	rest := page[open:]
	end := "</" + tag + ">"
	if j := strings.Index(rest[1:], end); j >= 0 {
		return rest[:j+1+len(end)]
	}
	return rest
}

var rowRE = regexp.MustCompile(`<tr( class="[^"]*")?><td(>| class)`)

// rows counts a table's body rows (not the one that says there are none).
func rows(t *testing.T, page, id string) int {
	t.Helper()
	return len(rowRE.FindAllString(section(t, page, id), -1))
}

// hidden is the value of a form's hidden input name.
func hidden(t *testing.T, page, name string) string {
	t.Helper()
	m := regexp.MustCompile(`name="` + name + `" value="([^"]*)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no hidden input %q on the page:\n%s", name, page)
	}
	return m[1]
}

var (
	headRE = regexp.MustCompile(`<th( class="([^"]*)")?>`)
	cellRE = regexp.MustCompile(`<td( class="([^"]*)")?>`)
)

// aligned fails the test unless every column of the table with id whose first
// body row's cell is a number (class num, right-aligned) has a header of class
// num too, and no other column does: a header sits over its numbers.
func aligned(t *testing.T, page, id string) {
	t.Helper()
	table := section(t, page, id)
	head, body, ok := strings.Cut(table, "</thead>")
	if !ok {
		t.Fatalf("table %s has no header:\n%s", id, table)
	}
	first, _, _ := strings.Cut(body, "</tr>")
	ths, tds := headRE.FindAllStringSubmatch(head, -1), cellRE.FindAllStringSubmatch(first, -1)
	if len(ths) != len(tds) {
		t.Fatalf("table %s: %d headers, %d cells in the first row:\n%s", id, len(ths), len(tds), table)
	}
	num := func(class string) bool { return slices.Contains(strings.Fields(class), "num") }
	for i := range ths {
		if num(ths[i][2]) != num(tds[i][2]) {
			t.Errorf("table %s, column %d: header %s over cell %s: a number's header is aligned as its numbers are", id, i+1, ths[i][0], tds[i][0])
		}
	}
}

func keys(prefix string, n int) []consumer.Key {
	out := make([]consumer.Key, n)
	for i := range out {
		out[i] = consumer.Key(fmt.Sprintf("%s-%03d", prefix, i))
	}
	return out
}

func recordPath(key consumer.Key, extra ...string) string {
	v := url.Values{"scope": {Scope}, "key": {string(key)}}
	for i := 0; i+1 < len(extra); i += 2 {
		v.Set(extra[i], extra[i+1])
	}
	return prefix + "/record?" + v.Encode()
}
