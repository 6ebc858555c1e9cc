package nethttp_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/adapters/nethttp"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/store/memory"
)

// The middleware's own CPU on the in-memory store, without a network: a first
// request (new key) and a replay. make bench-http measures the real thing.
func BenchmarkMiddlewareMemory(b *testing.B) {
	store, err := memory.NewStore(consumer.WithScope("bench"))
	if err != nil {
		b.Fatal(err)
	}
	mw, err := nethttp.New(store, nethttp.WithScope(nethttp.Unscoped))
	if err != nil {
		b.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/charges/ch_1")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"ch_1","amount":4200,"currency":"eur"}`))
	}))
	post := func(key string) {
		r := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(`{"amount":4200,"currency":"eur"}`))
		r.Header.Set(nethttp.HeaderKey, `"`+key+`"`)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusCreated {
			b.Fatal(w.Code)
		}
	}
	b.Run("first", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			post("first-" + strconv.Itoa(i))
		}
	})
	post("replay")
	b.Run("replay", func(b *testing.B) {
		for b.Loop() {
			post("replay")
		}
	})
}
