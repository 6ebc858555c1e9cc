package nethttp_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/nethttp"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
)

// A network partition to Redis (bytes stop, nothing closes): a request is
// answered 503 once the client's read timeout gives up, and runs nothing. When
// the partition heals, the claim that was held up lands after its caller gave up:
// the key answers 409 until that claim's lease runs out, then runs once. A
// completion whose reply is lost is sent again, and the client still gets its
// response.
func TestStorePartition(t *testing.T) {
	srv := testenv.RedisServer(t)
	proxy := testenv.NewFaultProxy(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: 300 * time.Millisecond,
		WriteTimeout: 300 * time.Millisecond, MaxRetries: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := redisstore.NewStore(rdb, consumer.WithScope("payments"), consumer.WithLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	runs := &counter{}
	s := serve(t, store, chargeHandler(runs))
	if got := s.do(t, req{Key: `"warm"`, Body: `{}`}); got.Status != 201 {
		t.Fatalf("warm-up: %d", got.Status)
	}

	proxy.Blackhole()
	start := time.Now()
	got := s.do(t, req{Key: `"part-1"`, Body: `{}`})
	if p := got.problem(t); got.Status != http.StatusServiceUnavailable || p.Code != "store-unavailable" || runs.load() != 1 {
		t.Fatalf("partitioned: %d %+v, %d runs", got.Status, p, runs.load())
	}
	t.Logf("503 after %v of partition", time.Since(start).Round(time.Millisecond))
	proxy.Pass()
	var ok reply
	testenv.Eventually(t, 10*time.Second, "the key to run once the partition heals", func() bool {
		ok = s.do(t, req{Key: `"part-1"`, Body: `{}`})
		if ok.Status != 201 && ok.Status != http.StatusConflict {
			t.Fatalf("after the partition: %d %s", ok.Status, ok.Body)
		}
		return ok.Status == 201
	})
	if runs.load() != 2 || ok.Header.Get(nethttp.HeaderReplayed) != "" {
		t.Fatalf("after the partition: %d runs, replayed %q", runs.load(), ok.Header.Get(nethttp.HeaderReplayed))
	}

	// The completion's reply is lost: it is sent again (the retried call answers
	// OK), the client gets the handler's response, and the retry gets it replayed.
	dropped := make(chan struct{})
	inner := chargeHandler(runs)
	s2 := serve(t, store, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inner.ServeHTTP(w, r)
		proxy.DropNextReply() // the next reply is the completion's
		close(dropped)
	}))
	first := s2.do(t, req{Key: `"drop-1"`, Body: `{}`})
	<-dropped
	again := s2.do(t, req{Key: `"drop-1"`, Body: `{}`})
	if first.Status != 201 || again.Body != first.Body || again.Header.Get(nethttp.HeaderReplayed) != "true" || runs.load() != 3 {
		t.Fatalf("dropped completion reply: %d then %d %q, %d runs", first.Status, again.Status, again.Header.Get(nethttp.HeaderReplayed), runs.load())
	}
}
