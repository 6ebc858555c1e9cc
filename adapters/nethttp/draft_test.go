package nethttp_test

// The points of draft-ietf-httpapi-idempotency-key-header, one test each, on every store.

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/nethttp"
	"github.com/idemkit/idemkit/consumer"
)

// The header is an sf-string Item: quoted keys are accepted (parameters ignored),
// anything else is refused with 400 and a problem body; unquoted keys only with
// WithLegacyKeys.
func TestDraftKeyIsStructuredFieldString(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore storeFactory) {
		runs := &counter{}
		strict := serve(t, newStore(t), chargeHandler(runs))
		legacy := serve(t, newStore(t), chargeHandler(runs), nethttp.WithLegacyKeys(true))
		cases := []struct {
			name           string
			value          string
			strict, legacy int // expected status
			code           string
		}{
			{"quoted uuid", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`, 201, 201, ""},
			{"quoted with parameters", `"k-params-1";a=1;b="x";c=?1;d=tok;e=:aGk=:;f=1.5`, 201, 201, ""},
			{"leading spaces", `   "k-spaces-1"`, 201, 201, ""},
			{"unquoted token", `k-unquoted-1`, 400, 201, "malformed-key"},
			{"unquoted uuid", `8e03978e-40d5-43e8-bc93-000000000001`, 400, 201, "malformed-key"},
			{"list of strings", `"k-a", "k-b"`, 400, 400, "malformed-key"},
			{"unquoted list", `k-a,k-b`, 400, 400, "malformed-key"},
			{"trailing garbage", `"k-x" y`, 400, 400, "malformed-key"},
			{"unterminated", `"k-x`, 400, 400, "malformed-key"},
			{"bad escape", `"k\x"`, 400, 400, "malformed-key"},
			{"bad parameter", `"k-x";A=1`, 400, 400, "malformed-key"},
			{"empty string", `""`, 400, 400, "invalid-key"},
			{"space inside", `"k x"`, 400, 400, "invalid-key"},
			{"escaped quote inside", `"k\"x"`, 400, 400, "invalid-key"},
			{"too long", quoted(strings.Repeat("k", 256)), 400, 400, "invalid-key"},
		}
		for _, c := range cases {
			for _, lane := range []struct {
				srv  *server
				want int
			}{{strict, c.strict}, {legacy, c.legacy}} {
				got := lane.srv.do(t, req{Key: c.value, Body: `{"amount":100}`})
				if got.Status != lane.want {
					t.Fatalf("%s (%s): status %d, want %d: %s", c.name, c.value, got.Status, lane.want, got.Body)
				}
				if got.Status == 400 {
					if p := got.problem(t); p.Code != c.code || p.Detail == "" {
						t.Fatalf("%s: problem %+v, want code %s with a detail", c.name, p, c.code)
					}
				}
			}
		}
		// Two header fields are refused even when each is valid.
		hr, _ := http.NewRequest(http.MethodPost, strict.URL+"/charges", strings.NewReader("{}"))
		hr.Header.Add(nethttp.HeaderKey, `"k-one"`)
		hr.Header.Add(nethttp.HeaderKey, `"k-two"`)
		resp, err := strict.client.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Fatalf("two Idempotency-Key fields: status %d, want 400", resp.StatusCode)
		}
		if got, want := runs.load(), 3+5; got != want {
			t.Fatalf("handler ran %d times, want %d (3 keys accepted strictly, 5 with legacy keys)", got, want)
		}
	})
}

// A request on an operation that requires a key and has none gets 400 with an
// application/problem+json body; without the requirement it passes through unguarded.
func TestDraftMissingKeyOnRequiredOperation(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore storeFactory) {
		runs := &counter{}
		required := serve(t, newStore(t), chargeHandler(runs), nethttp.WithKeyRequired(true),
			nethttp.WithProblemBase("https://api.example.com/docs/idempotency"))
		got := required.do(t, req{Body: `{"amount":100}`})
		p := got.problem(t)
		if got.Status != 400 || p.Code != "missing-key" || p.Type != "https://api.example.com/docs/idempotency#missing-key" ||
			p.Title != "Idempotency-Key is missing" {
			t.Fatalf("missing key on a required operation: %d %+v", got.Status, p)
		}
		if l := got.Header.Get("Link"); l != `<https://api.example.com/docs/idempotency>; rel="describedby"` {
			t.Fatalf("Link %q", l)
		}
		if runs.load() != 0 {
			t.Fatalf("handler ran %d times on a refused request", runs.load())
		}

		var sawInfo bool
		optional := serve(t, newStore(t), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, sawInfo = consumer.InfoFromContext(r.Context())
			w.WriteHeader(http.StatusAccepted)
		}))
		if got := optional.do(t, req{Body: `{}`}); got.Status != http.StatusAccepted || sawInfo {
			t.Fatalf("no key, not required: status %d, guarded %v; want 202 unguarded", got.Status, sawInfo)
		}
		// Safe methods are never guarded, key or not.
		if got := required.do(t, req{Method: http.MethodGet, Key: `"k-get"`}); got.Status != 201 || got.Header.Get(nethttp.HeaderReplayed) != "" {
			t.Fatalf("GET: %d", got.Status)
		}
		if got := required.do(t, req{Method: http.MethodGet, Key: `"k-get"`}); got.Status != 201 || runs.load() != 2 {
			t.Fatalf("GET again: status %d, %d runs; want it run again", got.Status, runs.load())
		}
	})
}

// First request: processed normally; the handler reads key, attempt and fence
// from its context, and the client gets every header the handler set.
func TestDraftFirstRequestIsProcessed(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore storeFactory) {
		var info consumer.Info
		runs := &counter{}
		inner := chargeHandler(runs)
		srv := serve(t, newStore(t), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			info, _ = consumer.InfoFromContext(r.Context())
			inner.ServeHTTP(w, r)
		}))
		got := srv.do(t, req{Key: `"first-1"`, Body: `{"amount":100}`})
		if got.Status != 201 || got.Header.Get("Set-Cookie") == "" || got.Header.Get("X-Internal") == "" ||
			got.Header.Get(nethttp.HeaderReplayed) != "" || runs.load() != 1 {
			t.Fatalf("first request: %d %v %s (runs %d)", got.Status, got.Header, got.Body, runs.load())
		}
		if info.Attempt != 1 || info.Fence != 1 || info.Key == "" || strings.Contains(string(info.Key), "first-1") {
			t.Fatalf("handler's info %+v: want attempt 1, fence 1 and the hashed key", info)
		}
	})
}

// Retry after completion: the stored status, allow-listed headers and body, marked
// Idempotent-Replayed: true; never Set-Cookie, nor the first response's Date.
func TestDraftRetryAfterCompletionReplays(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore storeFactory) {
		runs := &counter{}
		store := newStore(t)
		srv := serve(t, store, chargeHandler(runs))
		first := srv.do(t, req{Key: `"replay-1"`, Body: `{"amount":100}`})
		again := srv.do(t, req{Key: `"replay-1"`, Body: `{"amount":100}`})
		if runs.load() != 1 {
			t.Fatalf("handler ran %d times, want 1", runs.load())
		}
		if again.Status != first.Status || again.Body != first.Body || again.Header.Get(nethttp.HeaderReplayed) != "true" {
			t.Fatalf("replay %d %q (replayed %q), first %d %q", again.Status, again.Body,
				again.Header.Get(nethttp.HeaderReplayed), first.Status, first.Body)
		}
		for _, h := range []string{"Location", "Content-Location", "ETag", "Last-Modified", "Link", "Content-Type"} {
			if again.Header.Get(h) == "" || again.Header.Get(h) != first.Header.Get(h) {
				t.Fatalf("%s: replayed %q, first %q", h, again.Header.Get(h), first.Header.Get(h))
			}
		}
		if again.Header.Get("Set-Cookie") != "" || again.Header.Get("X-Internal") != "" {
			t.Fatalf("replay carries headers off the allow-list: %v", again.Header)
		}
		// What is stored: no Set-Cookie, no Date.
		rec := peek(t, store, "alice", "replay-1")
		var stored nethttp.StoredResponse
		if err := json.Unmarshal(rec.Result, &stored); err != nil {
			t.Fatal(err)
		}
		if stored.Status != 201 || stored.Header.Get("Set-Cookie") != "" || stored.Header.Get("Date") != "" || string(stored.Body) != first.Body {
			t.Fatalf("stored %+v", stored)
		}
	})
}

// Concurrent request: a retry while the first runs gets 409 with Retry-After and a
// problem body; once the first is done, the retry gets its response.
func TestDraftConcurrentRetryGets409(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore storeFactory) {
		runs := &counter{}
		started, release := make(chan struct{}), make(chan struct{})
		inner := chargeHandler(runs)
		srv := serve(t, newStore(t), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(started)
			<-release
			inner.ServeHTTP(w, r)
		}))
		firstDone := srv.goDo(t, req{Key: `"busy-1"`, Body: `{"amount":100}`})
		<-started
		got := srv.do(t, req{Key: `"busy-1"`, Body: `{"amount":100}`})
		p := got.problem(t)
		if got.Status != 409 || got.Header.Get("Retry-After") != "1" || p.Code != "key-in-progress" {
			t.Fatalf("concurrent retry: %d Retry-After %q %+v", got.Status, got.Header.Get("Retry-After"), p)
		}
		close(release)
		first := <-firstDone
		again := srv.do(t, req{Key: `"busy-1"`, Body: `{"amount":100}`})
		if first.Status != 201 || again.Body != first.Body || again.Header.Get(nethttp.HeaderReplayed) != "true" || runs.load() != 1 {
			t.Fatalf("after the first finished: %d %q vs %q, runs %d", again.Status, again.Body, first.Body, runs.load())
		}
	})
}

// With WithWaitInProgress the concurrent retry waits for the first and gets its
// stored response instead of 409.
func TestDraftConcurrentRetryWaitsBounded(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore storeFactory) {
		runs := &counter{}
		started, release := make(chan struct{}), make(chan struct{})
		inner := chargeHandler(runs)
		srv := serve(t, newStore(t), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(started)
			<-release
			inner.ServeHTTP(w, r)
		}), nethttp.WithWaitInProgress(20*time.Second))
		firstDone := srv.goDo(t, req{Key: `"wait-1"`, Body: `{}`})
		<-started
		waiterDone := srv.goDo(t, req{Key: `"wait-1"`, Body: `{}`})
		select {
		case r := <-waiterDone:
			t.Fatalf("the waiting retry answered %d before the first finished", r.Status)
		case <-time.After(300 * time.Millisecond): // it is waiting (a bounded check, not a speed assertion)
		}
		close(release)
		first, waited := <-firstDone, <-waiterDone
		if waited.Status != 201 || waited.Body != first.Body || waited.Header.Get(nethttp.HeaderReplayed) != "true" || runs.load() != 1 {
			t.Fatalf("waited retry: %d %q vs first %q, runs %d", waited.Status, waited.Body, first.Body, runs.load())
		}
	})
}

// The same key with a different request gets 422, after completion and while the
// first runs (422 wins over 409).
func TestDraftKeyReusedWithDifferentRequest(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore storeFactory) {
		runs := &counter{}
		started, release := make(chan struct{}), make(chan struct{})
		inner := chargeHandler(runs)
		srv := serve(t, newStore(t), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.Contains(r.URL.Path, "slow") {
				close(started)
				<-release
			}
			inner.ServeHTTP(w, r)
		}))
		if got := srv.do(t, req{Key: `"reuse-1"`, Body: `{"amount":100}`}); got.Status != 201 {
			t.Fatalf("first: %d", got.Status)
		}
		for _, q := range []req{
			{Key: `"reuse-1"`, Body: `{"amount":200}`},
			{Key: `"reuse-1"`, Body: `{"amount":100}`, Path: "/refunds"},
			{Key: `"reuse-1"`, Body: `{"amount":100}`, Path: "/charges?currency=eur"},
			{Key: `"reuse-1"`, Body: `{"amount":100}`, Method: http.MethodPut},
		} {
			got := srv.do(t, q)
			if p := got.problem(t); got.Status != 422 || p.Code != "key-reused" {
				t.Fatalf("%+v: %d %+v, want 422", q, got.Status, p)
			}
		}
		slowDone := srv.goDo(t, req{Key: `"reuse-2"`, Path: "/slow", Body: `{"amount":100}`})
		<-started
		busy := srv.do(t, req{Key: `"reuse-2"`, Path: "/slow", Body: `{"amount":100}`})
		other := srv.do(t, req{Key: `"reuse-2"`, Path: "/slow", Body: `{"amount":999}`})
		close(release)
		<-slowDone
		if busy.Status != 409 || other.Status != 422 {
			t.Fatalf("while running: same request %d (want 409), different request %d (want 422)", busy.Status, other.Status)
		}
	})
}

// A store outage gets 503 with Retry-After (fail closed) and runs nothing; with
// WithFailOpen the handler runs unguarded and nothing is stored.
func TestDraftStoreOutage(t *testing.T) {
	for _, open := range []bool{false, true} {
		runs := &counter{}
		srvRedis := startPrivateRedis(t)
		store := privateStore(t, srvRedis)
		var unguarded bool
		inner := chargeHandler(runs)
		srv := serve(t, store, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			info, _ := consumer.InfoFromContext(r.Context())
			unguarded = info.Unguarded
			inner.ServeHTTP(w, r)
		}), nethttp.WithFailOpen(open), nethttp.WithRetryAfter(3*time.Second))
		srvRedis.Stop()
		got := srv.do(t, req{Key: `"outage-1"`, Body: `{}`})
		if !open {
			if p := got.problem(t); got.Status != 503 || p.Code != "store-unavailable" || got.Header.Get("Retry-After") != "3" || runs.load() != 0 {
				t.Fatalf("fail closed: %d %+v Retry-After %q, %d runs", got.Status, p, got.Header.Get("Retry-After"), runs.load())
			}
			continue
		}
		if got.Status != 201 || !unguarded || runs.load() != 1 {
			t.Fatalf("fail open: %d, unguarded %v, %d runs", got.Status, unguarded, runs.load())
		}
		if got := srv.do(t, req{Key: `"outage-1"`, Body: `{}`}); got.Status != 201 || runs.load() != 2 {
			t.Fatalf("fail open again: %d, %d runs (nothing is stored while the store is down)", got.Status, runs.load())
		}
	}
}

// peek returns the record of the client's raw key.
func peek(t *testing.T, store consumer.Store, scope, raw string) consumer.Record {
	t.Helper()
	rec, err := store.Peek(context.Background(), nethttp.HashKey(scope, raw))
	if err != nil || !rec.Found {
		t.Fatalf("peek %q: %v found=%v", raw, err, rec.Found)
	}
	return rec
}
