package idemprom_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/adapters/nethttp"
	"github.com/idemkit/idemkit/consumer"
)

// serveHTTP sends bodies, one after another with one Idempotency-Key, to a
// handler behind the HTTP middleware on store, and checks their statuses.
func serveHTTP(t *testing.T, store consumer.Store, bodies []string, statuses []int) {
	t.Helper()
	mw, err := nethttp.New(store, nethttp.WithScope(nethttp.Unscoped))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
	defer srv.Close()
	for i, b := range bodies {
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(nethttp.HeaderKey, `"order-1"`)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != statuses[i] {
			t.Fatalf("request %d: status %d, want %d", i, resp.StatusCode, statuses[i])
		}
	}
	srv.Client().CloseIdleConnections()
}
