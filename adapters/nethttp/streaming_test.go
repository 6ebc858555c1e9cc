package nethttp_test

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/adapters/nethttp"
)

// A handler that flushes or hijacks is refused by default: the client gets 500
// with a problem body (none of the handler's partial response), nothing is stored
// and the key is free for the next request.
func TestStreamingIsRefused(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore storeFactory) {
		runs := &counter{}
		var flushErr, hijackErr error
		srv := serve(t, newStore(t), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.n.Add(1)
			_, _ = io.WriteString(w, "data: part 1\n\n")
			if strings.HasSuffix(r.URL.Path, "/hijack") {
				_, _, hijackErr = http.NewResponseController(w).Hijack()
				return
			}
			w.(http.Flusher).Flush()
			flushErr = http.NewResponseController(w).Flush()
			_, _ = io.WriteString(w, "data: part 2\n\n")
		}))
		for i, path := range []string{"/events", "/events", "/events/hijack"} {
			got := srv.do(t, req{Key: `"stream-1` + path + `"`, Path: path, Body: `{}`})
			if p := got.problem(t); got.Status != 500 || p.Code != "streaming-refused" || strings.Contains(got.Body, "part 1") {
				t.Fatalf("request %d: %d %q", i, got.Status, got.Body)
			}
		}
		if !errors.Is(flushErr, nethttp.ErrStreamingRefused) || !errors.Is(hijackErr, nethttp.ErrStreamingRefused) {
			t.Fatalf("FlushError %v, Hijack %v: want ErrStreamingRefused", flushErr, hijackErr)
		}
		if runs.load() != 3 {
			t.Fatalf("handler ran %d times, want 3 (the refused key is released)", runs.load())
		}
	})
}

// With WithUnguardedStreaming the stream reaches the client as it is flushed (the
// client reads part 1 while the handler still waits), a hijacked connection works,
// nothing is stored and a retry runs again.
func TestStreamingPassesThroughUnguarded(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore storeFactory) {
		runs := &counter{}
		gotPart1 := make(chan struct{}, 2)
		srv := serve(t, newStore(t), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.n.Add(1)
			if strings.HasSuffix(r.URL.Path, "/hijack") {
				conn, brw, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhijacked")
				_ = brw.Flush()
				_ = conn.Close()
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: part 1\n\n")
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Error(err)
			}
			<-gotPart1 // the client has part 1 before part 2 is written
			_, _ = io.WriteString(w, "data: part 2\n\n")
		}), nethttp.WithUnguardedStreaming(true))
		for i := 0; i < 2; i++ {
			hr, _ := http.NewRequest(http.MethodPost, srv.URL+"/events", strings.NewReader("{}"))
			hr.Header.Set(nethttp.HeaderKey, `"stream-pass-1"`)
			resp, err := srv.client.Do(hr)
			if err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(resp.Body)
			line, err := br.ReadString('\n')
			if err != nil || line != "data: part 1\n" {
				t.Fatalf("first streamed line %q: %v", line, err)
			}
			gotPart1 <- struct{}{}
			rest, _ := io.ReadAll(br)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(string(rest), "part 2") || resp.Header.Get(nethttp.HeaderReplayed) != "" {
				t.Fatalf("stream %d: %d %q", i, resp.StatusCode, rest)
			}
		}
		got := srv.do(t, req{Key: `"hijack-pass-1"`, Path: "/hijack", Body: `{}`})
		if got.Status != 200 || got.Body != "hijacked" {
			t.Fatalf("hijacked: %d %q", got.Status, got.Body)
		}
		if runs.load() != 3 {
			t.Fatalf("handler ran %d times, want 3 (streams are not stored)", runs.load())
		}
	})
}

// A panicking handler: net/http aborts the response as it would without the
// middleware, the attempt is recorded as failed, and the retry runs again with
// the next attempt number and fence.
func TestHandlerPanicIsAFailedAttempt(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore storeFactory) {
		runs := &counter{}
		inner := chargeHandler(runs)
		store := newStore(t)
		srv := serve(t, store, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if runs.n.Add(1) == 1 {
				_, _ = io.WriteString(w, "half a response")
				panic(http.ErrAbortHandler) // net/http does not log this one
			}
			runs.n.Add(-1)
			inner.ServeHTTP(w, r)
		}))
		if _, err := srv.send(t.Context(), req{Key: `"panic-1"`, Body: `{}`}); err == nil {
			t.Fatal("the panicking request got a response")
		}
		if rec := peek(t, store, "alice", "panic-1"); rec.State != "retry" || rec.Attempts != 1 {
			t.Fatalf("after the panic: state %s, attempts %d", rec.State, rec.Attempts)
		}
		got := srv.do(t, req{Key: `"panic-1"`, Body: `{}`})
		if got.Status != 201 || !strings.Contains(got.Body, `"attempt":2`) || !strings.Contains(got.Body, `"fence":2`) {
			t.Fatalf("retry after the panic: %d %s", got.Status, got.Body)
		}
	})
}
