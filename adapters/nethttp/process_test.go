package nethttp_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/nethttp"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
)

// A server process SIGKILLed while its handler runs: the client's retry gets 409
// while the dead process's lease lasts, then runs the charge on another server
// with the next fence. The charge happens exactly once.
func TestServerKilledMidRequest(t *testing.T) {
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	cmd := testenv.StartSelf(t, envServer+"=1", envRedis+"="+testenv.RedisAddr(t), envPrefix+"="+prefix, envListen+"="+addr)
	testenv.Eventually(t, 30*time.Second, "the server process to listen", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
	dead := &server{URL: "http://" + addr, client: &http.Client{Transport: &http.Transport{}}}
	charge := req{Key: `"crash-1"`, Body: `{"amount":4200}`}
	lost := dead.goDoErr(charge)
	testenv.Eventually(t, 30*time.Second, "the handler to start in the server process", func() bool {
		return rdb.Exists(context.Background(), trapKey(prefix)).Val() == 1
	})
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if err := <-lost; err == nil {
		t.Fatal("the request to the killed server got a response")
	}

	store, err := redisstore.NewStore(rdb, consumer.WithPrefix(prefix), consumer.WithScope("payments"), consumer.WithLease(crashLease))
	if err != nil {
		t.Fatal(err)
	}
	book := testenv.NewLedger(rdb, prefix)
	runs := &counter{}
	inner := chargeHandler(runs)
	srv := serve(t, store, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := book.Apply(r.Context(), "crash-1"); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		inner.ServeHTTP(w, r)
	}))
	if got := srv.do(t, charge); got.Status != http.StatusConflict {
		t.Fatalf("retry within the dead server's lease: %d, want 409", got.Status)
	}
	var done reply
	testenv.Eventually(t, 4*crashLease, "the retry to run after the lease", func() bool {
		done = srv.do(t, charge)
		return done.Status != http.StatusConflict
	})
	// The dead server's claim was fresh and never settled: not an attempt.
	if done.Status != 201 || !strings.Contains(done.Body, `"fence":2`) || !strings.Contains(done.Body, `"attempt":1`) {
		t.Fatalf("retry after the lease: %d %s, want 201 with fence 2", done.Status, done.Body)
	}
	again := srv.do(t, charge)
	if again.Body != done.Body || again.Header.Get(nethttp.HeaderReplayed) != "true" {
		t.Fatalf("replay: %d %s", again.Status, again.Body)
	}
	counts, stale := book.Counts(t)
	if counts["crash-1"] != 1 || stale != 0 || runs.load() != 1 {
		t.Fatalf("charge ran %d times (%d stale writes, %d handler runs), want once", counts["crash-1"], stale, runs.load())
	}
}
