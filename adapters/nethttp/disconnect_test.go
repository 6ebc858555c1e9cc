package nethttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/nethttp"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
)

// disconnecting sends q, waits until the handler has started, and disconnects.
func disconnecting(t *testing.T, srv *server, q req, started <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := srv.send(ctx, q)
		done <- err
	}()
	<-started
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the disconnected request got a response")
	}
}

// A client that disconnects mid-request: the handler's context is cancelled, and a
// handler that stops without a 2xx releases the key at once (a 30s lease is never
// waited out); the retry runs the operation.
func TestClientDisconnectReleasesTheKey(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore storeFactory) {
		runs := &counter{}
		started := make(chan struct{}, 1)
		inner := chargeHandler(runs)
		var first atomic.Bool
		first.Store(true)
		store := newStore(t, consumer.WithLease(30*time.Second))
		srv := serve(t, store, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if first.Swap(false) {
				started <- struct{}{}
				<-r.Context().Done() // the operation gives up with its caller
				return               // nothing written
			}
			inner.ServeHTTP(w, r)
		}))
		disconnecting(t, srv, req{Key: `"gone-1"`, Body: `{}`}, started)
		testenv.Eventually(t, 5*time.Second, "the key released", func() bool {
			rec, err := store.Peek(context.Background(), nethttp.HashKey("alice", "gone-1"))
			return err == nil && rec.State == "retry"
		})
		got := srv.do(t, req{Key: `"gone-1"`, Body: `{}`})
		if got.Status != 201 || got.Header.Get(nethttp.HeaderReplayed) != "" || !strings.Contains(got.Body, `"attempt":1`) || runs.load() != 1 {
			t.Fatalf("retry after the disconnect: %d %s, %d runs", got.Status, got.Body, runs.load())
		}
	})
}

// A handler that finishes its operation although the client left: its response is
// stored and the retry gets it.
func TestClientDisconnectAfterTheOperationReplays(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore storeFactory) {
		runs := &counter{}
		started := make(chan struct{}, 1)
		inner := chargeHandler(runs)
		store := newStore(t)
		srv := serve(t, store, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			started <- struct{}{}
			<-r.Context().Done() // the client is gone; the charge goes through anyway
			inner.ServeHTTP(w, r)
		}))
		disconnecting(t, srv, req{Key: `"gone-2"`, Body: `{}`}, started)
		testenv.Eventually(t, 5*time.Second, "the response stored", func() bool {
			rec, err := store.Peek(context.Background(), nethttp.HashKey("alice", "gone-2"))
			return err == nil && rec.State == "completed"
		})
		got := srv.do(t, req{Key: `"gone-2"`, Body: `{}`})
		if got.Status != 201 || got.Header.Get(nethttp.HeaderReplayed) != "true" || runs.load() != 1 {
			t.Fatalf("retry: %d replayed %q, %d runs", got.Status, got.Header.Get(nethttp.HeaderReplayed), runs.load())
		}
	})
}

// WithContinueOnDisconnect: the handler's context outlives the client, the
// operation completes, and the retry gets its response.
func TestContinueOnDisconnect(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore storeFactory) {
		runs := &counter{}
		started, proceed := make(chan struct{}, 1), make(chan struct{})
		var clientCtx atomic.Value // the connection's request context
		var handlerErr atomic.Value
		inner := chargeHandler(runs)
		store := newStore(t)
		mw, err := nethttp.New(store, nethttp.WithScope(userScope), nethttp.WithContinueOnDisconnect(true))
		if err != nil {
			t.Fatal(err)
		}
		guarded := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			started <- struct{}{}
			<-proceed
			handlerErr.Store(struct{ error }{r.Context().Err()})
			inner.ServeHTTP(w, r)
		}))
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			clientCtx.Store(r.Context())
			guarded.ServeHTTP(w, r)
		}))
		tr := &http.Transport{}
		t.Cleanup(func() { tr.CloseIdleConnections(); hs.Close() })
		srv := &server{URL: hs.URL, client: &http.Client{Transport: tr}}

		disconnecting(t, srv, req{Key: `"detach-1"`, Body: `{}`}, started)
		testenv.Eventually(t, 5*time.Second, "the server to see the disconnect", func() bool {
			return clientCtx.Load().(context.Context).Err() != nil
		})
		close(proceed)
		testenv.Eventually(t, 5*time.Second, "the response stored", func() bool {
			rec, err := store.Peek(context.Background(), nethttp.HashKey("alice", "detach-1"))
			return err == nil && rec.State == "completed"
		})
		if e := handlerErr.Load().(struct{ error }); e.error != nil {
			t.Fatalf("the handler's context was cancelled: %v", e.error)
		}
		got := srv.do(t, req{Key: `"detach-1"`, Body: `{}`})
		if got.Status != 201 || got.Header.Get(nethttp.HeaderReplayed) != "true" || runs.load() != 1 {
			t.Fatalf("retry: %d, %d runs", got.Status, runs.load())
		}
	})
}
