package nethttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemkit/idemkit/adapters/nethttp"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/store/memory"
)

// A charge endpoint behind the middleware: the retry gets the stored response, a
// reused key with another body gets 422. The in-memory store stands in for
// redis.NewStore (package idemkit/store/redis).
func Example() {
	store, err := memory.NewStore(consumer.WithScope("payments-api"))
	if err != nil {
		panic(err)
	}
	mw, err := nethttp.New(store,
		nethttp.WithScope(func(r *http.Request) (string, error) { return r.Header.Get("X-Api-Key-Id"), nil }),
		nethttp.WithKeyRequired(true))
	if err != nil {
		panic(err)
	}
	charges := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info, _ := consumer.InfoFromContext(r.Context()) // key, attempt, fence
		w.Header().Set("Location", "/charges/ch_1")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "charged (attempt %d)\n", info.Attempt)
	})
	srv := httptest.NewServer(mw.Handler(charges))
	defer srv.Close()

	post := func(key, body string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("X-Api-Key-Id", "key_123")
		resp, err := srv.Client().Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(strings.TrimSpace(fmt.Sprint(resp.StatusCode, " ", resp.Header.Get("Location"), " ",
			resp.Header.Get("Idempotent-Replayed"))))
	}
	post(`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, `{"amount":4200}`)
	post(`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, `{"amount":4200}`)
	post(`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, `{"amount":9900}`)
	post(`8e03978e-40d5-43e8-bc93-6894a57f9324`, `{"amount":4200}`)
	// Output:
	// 201 /charges/ch_1
	// 201 /charges/ch_1 true
	// 422
	// 400
}
