package ui_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/admin/ui"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/store/memory"
)

// A service mounts the UI under a path of its own, and names the person behind
// each change from its own authentication.
func Example() {
	store, err := memory.NewStore(consumer.WithScope("payments"))
	if err != nil {
		panic(err)
	}
	in, err := admin.New(store)
	if err != nil {
		panic(err)
	}
	h, err := ui.New(in, ui.WithPrefix("/idemkit"), ui.WithActor(func(r *http.Request) (string, error) {
		user, _, ok := r.BasicAuth() // the service's own authentication goes here
		if !ok {
			return "", errors.New("sign in first")
		}
		return user, nil
	}))
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/idemkit/", h)

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/idemkit/records", nil))
	fmt.Println(rec.Code, rec.Header().Get("Content-Type"))
	// Output: 200 text/html; charset=utf-8
}
