package nethttp_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/adapters/nethttp"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/store/memory"
	redisstore "github.com/idemkit/idemkit/store/redis"
)

// Upstream 5xx and 429 are sent to the client and not stored: the key is released
// without counting the attempt, so more failures than the store's max attempts
// never turn the key into a 422 or a stored failure. 4xx are stored and replayed.
func TestPolicyFailuresReleaseTheKey(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore storeFactory) {
		runs := &counter{}
		store := newStore(t, consumer.WithMaxAttempts(3))
		inner := chargeHandler(runs)
		var fails counter
		srv := serve(t, store, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case strings.HasSuffix(r.URL.Path, "/bad"):
				runs.n.Add(1)
				http.Error(w, "amount must be positive", http.StatusBadRequest)
			case fails.n.Add(1) <= 6:
				runs.n.Add(1)
				status := http.StatusBadGateway
				if fails.load()%2 == 0 {
					status = http.StatusTooManyRequests
				}
				w.Header().Set("Retry-After", "0")
				http.Error(w, "upstream down", status)
			default:
				inner.ServeHTTP(w, r)
			}
		}))
		for i := 1; i <= 6; i++ {
			got := srv.do(t, req{Key: `"upstream-1"`, Body: `{"amount":100}`})
			if got.Status != 502 && got.Status != 429 || got.Header.Get(nethttp.HeaderReplayed) != "" {
				t.Fatalf("request %d: %d %q, want the handler's own 502/429", i, got.Status, got.Body)
			}
		}
		ok := srv.do(t, req{Key: `"upstream-1"`, Body: `{"amount":100}`})
		again := srv.do(t, req{Key: `"upstream-1"`, Body: `{"amount":100}`})
		if ok.Status != 201 || again.Status != 201 || again.Body != ok.Body || again.Header.Get(nethttp.HeaderReplayed) != "true" {
			t.Fatalf("after six upstream failures: %d then %d (%q vs %q)", ok.Status, again.Status, ok.Body, again.Body)
		}
		if runs.load() != 7 {
			t.Fatalf("handler ran %d times, want 7", runs.load())
		}
		if rec := peek(t, store, "alice", "upstream-1"); rec.Attempts != 1 || rec.State != "completed" {
			t.Fatalf("record after six released failures: attempts %d, state %s; want 1, completed", rec.Attempts, rec.State)
		}

		bad := srv.do(t, req{Key: `"bad-1"`, Path: "/charges/bad", Body: `{"amount":-1}`})
		badAgain := srv.do(t, req{Key: `"bad-1"`, Path: "/charges/bad", Body: `{"amount":-1}`})
		if bad.Status != 400 || badAgain.Status != 400 || badAgain.Body != bad.Body || badAgain.Header.Get(nethttp.HeaderReplayed) != "true" || runs.load() != 8 {
			t.Fatalf("4xx: %d then %d replayed %q, %d runs; want it stored", bad.Status, badAgain.Status,
				badAgain.Header.Get(nethttp.HeaderReplayed), runs.load())
		}
	})
}

// StoreEverything stores a 500 like any response.
func TestPolicyStoreEverything(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore storeFactory) {
		runs := &counter{}
		srv := serve(t, newStore(t), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.n.Add(1)
			http.Error(w, "card processor said no", http.StatusInternalServerError)
		}), nethttp.WithStorePolicy(nethttp.StoreEverything))
		first := srv.do(t, req{Key: `"all-1"`, Body: `{}`})
		again := srv.do(t, req{Key: `"all-1"`, Body: `{}`})
		if first.Status != 500 || again.Status != 500 || again.Header.Get(nethttp.HeaderReplayed) != "true" || runs.load() != 1 {
			t.Fatalf("store everything: %d, %d replayed %q, %d runs", first.Status, again.Status, again.Header.Get(nethttp.HeaderReplayed), runs.load())
		}
	})
}

// The fingerprint: canonical JSON ignores whitespace and member order, selected
// headers count, a custom function replaces it, and it can be turned off.
func TestFingerprintOptions(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore storeFactory) {
		runs := &counter{}
		canon := serve(t, newStore(t), chargeHandler(runs), nethttp.WithCanonicalJSON(true), nethttp.WithFingerprintHeaders("X-Account"))
		plain := serve(t, newStore(t), chargeHandler(runs))
		custom := serve(t, newStore(t), chargeHandler(runs), nethttp.WithFingerprintFunc(func(r *http.Request, body []byte) ([]byte, error) {
			if len(body) == 0 {
				return nil, errors.New("a charge needs a body")
			}
			return []byte(r.URL.Path), nil // the body does not count
		}))
		off := serve(t, newStore(t), chargeHandler(runs), nethttp.WithFingerprint(false))
		a, b := `{"amount":100,"currency":"eur"}`, "{ \"currency\" : \"eur\",\n \"amount\" : 100 }"
		hdr := map[string]string{"X-Account": "acct-1"}
		cases := []struct {
			name   string
			srv    *server
			first  req
			second req
			want   int
		}{
			{"canonical JSON, reordered", canon, req{Key: `"fp-1"`, Body: a, Header: hdr}, req{Key: `"fp-1"`, Body: b, Header: hdr}, 201},
			{"canonical JSON, other value", canon, req{Key: `"fp-2"`, Body: a, Header: hdr}, req{Key: `"fp-2"`, Body: strings.Replace(a, "100", "101", 1), Header: hdr}, 422},
			{"selected header differs", canon, req{Key: `"fp-3"`, Body: a, Header: hdr}, req{Key: `"fp-3"`, Body: a, Header: map[string]string{"X-Account": "acct-2"}}, 422},
			{"bytes, reordered", plain, req{Key: `"fp-4"`, Body: a}, req{Key: `"fp-4"`, Body: b}, 422},
			{"custom, body ignored", custom, req{Key: `"fp-5"`, Body: a}, req{Key: `"fp-5"`, Body: `{"amount":1}`}, 201},
			{"custom, path differs", custom, req{Key: `"fp-6"`, Body: a}, req{Key: `"fp-6"`, Body: a, Path: "/other"}, 422},
			{"off, body differs", off, req{Key: `"fp-7"`, Body: a}, req{Key: `"fp-7"`, Body: `{"amount":1}`}, 201},
		}
		for _, c := range cases {
			if got := c.srv.do(t, c.first); got.Status != 201 {
				t.Fatalf("%s: first %d %s", c.name, got.Status, got.Body)
			}
			got := c.srv.do(t, c.second)
			if got.Status != c.want || (c.want == 201 && got.Header.Get(nethttp.HeaderReplayed) != "true") {
				t.Fatalf("%s: second %d (replayed %q), want %d", c.name, got.Status, got.Header.Get(nethttp.HeaderReplayed), c.want)
			}
		}
		if got := custom.do(t, req{Key: `"fp-8"`}); got.Status != 400 || got.problem(t).Code != "bad-fingerprint" {
			t.Fatalf("fingerprint function error: %d", got.Status)
		}
		if runs.load() != len(cases) {
			t.Fatalf("handler ran %d times, want %d", runs.load(), len(cases))
		}
	})
}

// Keys are scoped: two clients sending the same key each get their own operation
// and response, and the raw key is stored nowhere.
func TestScopeIsolatesClients(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore storeFactory) {
		runs := &counter{}
		store := newStore(t)
		srv := serve(t, store, chargeHandler(runs))
		const key = "shared-key-4d1c9a"
		alice := srv.do(t, req{Key: quoted(key), Body: `{"amount":100}`, Header: map[string]string{"X-User": "alice"}})
		bob := srv.do(t, req{Key: quoted(key), Body: `{"amount":100}`, Header: map[string]string{"X-User": "bob"}})
		aliceAgain := srv.do(t, req{Key: quoted(key), Body: `{"amount":100}`, Header: map[string]string{"X-User": "alice"}})
		bobAgain := srv.do(t, req{Key: quoted(key), Body: `{"amount":100}`, Header: map[string]string{"X-User": "bob"}})
		if runs.load() != 2 || alice.Body == bob.Body || aliceAgain.Body != alice.Body || bobAgain.Body != bob.Body {
			t.Fatalf("%d runs; alice %q/%q, bob %q/%q", runs.load(), alice.Body, aliceAgain.Body, bob.Body, bobAgain.Body)
		}
		if rec, err := store.Peek(context.Background(), consumer.Key(key)); err != nil || rec.Found {
			t.Fatalf("the raw key has a record: %v %v", rec.Found, err)
		}
		if rs, ok := store.(*redisstore.Store); ok {
			if k := rs.RecordKey(nethttp.HashKey("alice", key)); strings.Contains(k, key) {
				t.Fatalf("record key %q holds the raw key", k)
			}
		}
		// The scope function's failure is a 500, and nothing runs.
		mw, err := nethttp.New(newStore(t), nethttp.WithScope(func(*http.Request) (string, error) { return "", errors.New("no session") }))
		if err != nil {
			t.Fatal(err)
		}
		rw := httptest.NewRecorder()
		hr, _ := http.NewRequest(http.MethodPost, "/charges", strings.NewReader("{}"))
		hr.Header.Set(nethttp.HeaderKey, `"scope-fail-1"`)
		mw.Handler(chargeHandler(runs)).ServeHTTP(rw, hr)
		if rw.Code != 500 || !strings.Contains(rw.Body.String(), "scope-failed") || runs.load() != 2 {
			t.Fatalf("scope function error: %d %s", rw.Code, rw.Body.String())
		}
	})
}

// Bad input gets a clear answer and runs nothing: a body over the limit (413), a
// key of the wrong length or characters (400).
func TestBadRequests(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore storeFactory) {
		runs := &counter{}
		srv := serve(t, newStore(t), chargeHandler(runs), nethttp.WithMaxBodySize(64), nethttp.WithKeyLength(16, 64),
			nethttp.WithKeyRequired(true))
		cases := []struct {
			name string
			q    req
			want int
			code string
		}{
			{"body over the limit", req{Key: `"0123456789abcdef"`, Body: strings.Repeat("x", 65)}, 413, "body-too-large"},
			{"key too short", req{Key: `"short"`, Body: "{}"}, 400, "invalid-key"},
			{"key too long", req{Key: quoted(strings.Repeat("k", 65)), Body: "{}"}, 400, "invalid-key"},
			{"key with a slash-star", req{Key: `"0123456789abcdef*"`, Body: "{}"}, 400, "invalid-key"},
			{"key with non-ASCII", req{Key: "\"0123456789abcdef\xc3\xa9\"", Body: "{}"}, 400, "malformed-key"},
			{"no key", req{Body: "{}"}, 400, "missing-key"},
		}
		for _, c := range cases {
			got := srv.do(t, c.q)
			if p := got.problem(t); got.Status != c.want || p.Code != c.code || p.Detail == "" {
				t.Fatalf("%s: %d %+v, want %d %s", c.name, got.Status, p, c.want, c.code)
			}
		}
		// A chunked body over the limit (no Content-Length) is cut off too.
		hr, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader(strings.Repeat("y", 100)))
		hr.ContentLength = -1
		hr.Header.Set(nethttp.HeaderKey, `"0123456789abcdef"`)
		resp, err := srv.client.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 413 || runs.load() != 0 {
			t.Fatalf("chunked body over the limit: %d, %d runs", resp.StatusCode, runs.load())
		}
		if got := srv.do(t, req{Key: `"0123456789abcdef"`, Body: strings.Repeat("x", 64)}); got.Status != 201 {
			t.Fatalf("body at the limit: %d", got.Status)
		}
	})
}

// New refuses a bad configuration with an error that says what to change.
func TestNewRefusesBadConfiguration(t *testing.T) {
	good := memoryStore(t)
	defaultScope, _ := memory.NewStore()
	cases := []struct {
		name  string
		store consumer.Store
		opts  []nethttp.Option
		want  string
	}{
		{"nil store", nil, []nethttp.Option{nethttp.WithScope(nethttp.Unscoped)}, "nil store"},
		{"default scope", defaultScope, []nethttp.Option{nethttp.WithScope(nethttp.Unscoped)}, "default scope"},
		{"no scope function", good, nil, "WithScope"},
		{"nil option", good, []nethttp.Option{nethttp.WithScope(nethttp.Unscoped), nil}, "nil option"},
		{"key length", good, []nethttp.Option{nethttp.WithScope(nethttp.Unscoped), nethttp.WithKeyLength(10, 5)}, "WithKeyLength"},
		{"key length over the core's", good, []nethttp.Option{nethttp.WithScope(nethttp.Unscoped), nethttp.WithKeyLength(1, 600)}, "WithKeyLength"},
		{"Set-Cookie replayed", good, []nethttp.Option{nethttp.WithScope(nethttp.Unscoped), nethttp.WithReplayHeaders("set-cookie")}, "never replayed"},
		{"Date replayed", good, []nethttp.Option{nethttp.WithScope(nethttp.Unscoped), nethttp.WithReplayHeaders("Date")}, "never replayed"},
		{"lower-case method", good, []nethttp.Option{nethttp.WithScope(nethttp.Unscoped), nethttp.WithMethods("post")}, "upper case"},
		{"no methods", good, []nethttp.Option{nethttp.WithScope(nethttp.Unscoped), nethttp.WithMethods()}, "at least one method"},
		{"negative wait", good, []nethttp.Option{nethttp.WithScope(nethttp.Unscoped), nethttp.WithWaitInProgress(-1)}, "WithWaitInProgress"},
		{"nil policy", good, []nethttp.Option{nethttp.WithScope(nethttp.Unscoped), nethttp.WithStorePolicy(nil)}, "WithStorePolicy"},
		{"zero body", good, []nethttp.Option{nethttp.WithScope(nethttp.Unscoped), nethttp.WithMaxBodySize(0)}, "WithMaxBodySize"},
		{"zero response buffer", good, []nethttp.Option{nethttp.WithScope(nethttp.Unscoped), nethttp.WithMaxResponseBuffer(0)}, "WithMaxResponseBuffer(0)"},
		{"problem base with fragment", good, []nethttp.Option{nethttp.WithScope(nethttp.Unscoped), nethttp.WithProblemBase("https://x/#a")}, "WithProblemBase"},
	}
	for _, c := range cases {
		_, err := nethttp.New(c.store, c.opts...)
		if !errors.Is(err, nethttp.ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrConfig mentioning %q", c.name, err, c.want)
		}
	}
	// Handler(nil) answers 500 instead of panicking.
	mw, err := nethttp.New(good, nethttp.WithScope(nethttp.Unscoped))
	if err != nil {
		t.Fatal(err)
	}
	rw := httptest.NewRecorder()
	hr, _ := http.NewRequest(http.MethodPost, "/", nil)
	mw.Handler(nil).ServeHTTP(rw, hr)
	if rw.Code != 500 {
		t.Fatalf("Handler(nil): %d", rw.Code)
	}
}
