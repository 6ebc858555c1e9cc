package observertest

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/adapters/nethttp"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/store/memory"
)

// HTTPScope is the scope of the store HTTP uses.
const HTTPScope = "api"

// HTTP sends three requests with one Idempotency-Key through the HTTP middleware
// on a memory store (scope HTTPScope) that obs observes: the first runs (201),
// the second is replayed (201), the third carries another body and is refused
// (422). obs sees three executions of source http: success, duplicate, and an
// error of kind conflict whose action is reject.
func HTTP(t testing.TB, obs ...consumer.Observer) {
	t.Helper()
	s, err := memory.NewStore(consumer.WithScope(HTTPScope), consumer.WithObserver(obs...))
	if err != nil {
		t.Fatal(err)
	}
	mw, err := nethttp.New(s, nethttp.WithScope(nethttp.Unscoped))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	for i, c := range []struct {
		body   string
		status int
	}{{`{"amount":1}`, http.StatusCreated}, {`{"amount":1}`, http.StatusCreated}, {`{"amount":2}`, http.StatusUnprocessableEntity}} {
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(nethttp.HeaderKey, `"order-1"`)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Fatalf("observertest: request %d: status %d, want %d", i, resp.StatusCode, c.status)
		}
	}
}
