package nethttp_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/nethttp"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
)

// serverCalls is what a private Redis ran since the last call, by command (calls
// made inside scripts included), from INFO commandstats; the statistics are reset.
func serverCalls(t *testing.T, c *redis.Client) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		if name == "info" || name == "config|resetstat" {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				out[name], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return out
}

func sameCalls(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// A replay of a completed key costs Redis one GET of the record and runs no
// script, counted by Redis itself. Every other answer still comes from the begin
// script: a key reused with another body is 422, a key whose first request still
// runs is 409, a key holding something that is not a record is 500; none runs the
// handler.
func TestReplayCostsOneRead(t *testing.T) {
	srv := testenv.RedisServer(t)
	c := srv.Client(t)
	st := privateStore(t, srv)
	if err := st.(*redisstore.Store).Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	runs := &counter{}
	s := serve(t, st, chargeHandler(runs))
	recordKey := func(raw string) string { return st.(*redisstore.Store).RecordKey(nethttp.HashKey("alice", raw)) }

	first := s.do(t, req{Key: `"k-1"`, Body: `{"amount":1}`})
	if first.Status != http.StatusCreated || runs.load() != 1 {
		t.Fatalf("first request: %d, %d runs", first.Status, runs.load())
	}
	serverCalls(t, c)
	for i := 0; i < 3; i++ {
		again := s.do(t, req{Key: `"k-1"`, Body: `{"amount":1}`})
		if again.Status != http.StatusCreated || again.Body != first.Body || again.Header.Get(nethttp.HeaderReplayed) != "true" {
			t.Fatalf("replay %d: %d %q %s", i, again.Status, again.Header.Get(nethttp.HeaderReplayed), again.Body)
		}
	}
	if calls, want := serverCalls(t, c), map[string]int64{"getex": 3}; !sameCalls(calls, want) {
		t.Fatalf("three replays ran %v on Redis, want %v (one GET each, no script)", calls, want)
	}

	// Another body under the same key: the read sees another fingerprint, and the
	// begin script answers the conflict.
	reused := s.do(t, req{Key: `"k-1"`, Body: `{"amount":2}`})
	if p := reused.problem(t); reused.Status != http.StatusUnprocessableEntity || p.Code != "key-reused" {
		t.Fatalf("reused key: %d %+v", reused.Status, p)
	}
	if calls, want := serverCalls(t, c), map[string]int64{"getex": 1, "get": 1, "set": 1, "evalsha": 1}; !sameCalls(calls, want) {
		t.Fatalf("a reused key ran %v, want %v (the read, then the begin script: its SET NX and GET)", calls, want)
	}

	// A first request still running (its claim made by another instance).
	other := st.Begin(context.Background(), []consumer.Claim{{Key: nethttp.HashKey("alice", "k-2"), Owner: "other-instance"}})[0]
	if !other.Claimed() {
		t.Fatalf("claim: %+v", other)
	}
	serverCalls(t, c)
	busy := s.do(t, req{Key: `"k-2"`, Body: `{"amount":1}`})
	if p := busy.problem(t); busy.Status != http.StatusConflict || p.Code != "key-in-progress" {
		t.Fatalf("key in progress: %d %+v", busy.Status, p)
	}
	if calls, want := serverCalls(t, c), map[string]int64{"getex": 1, "get": 1, "set": 1, "evalsha": 1, "pttl": 1}; !sameCalls(calls, want) {
		t.Fatalf("a key in progress ran %v, want %v", calls, want)
	}

	// A value that is not a record.
	if err := c.Set(context.Background(), recordKey("k-3"), "hello", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	serverCalls(t, c)
	bad := s.do(t, req{Key: `"k-3"`, Body: `{"amount":1}`})
	if bad.Status != http.StatusInternalServerError {
		t.Fatalf("corrupt record: %d %s", bad.Status, bad.Body)
	}
	if calls, want := serverCalls(t, c), map[string]int64{"getex": 1, "get": 1, "set": 1, "evalsha": 1}; !sameCalls(calls, want) {
		t.Fatalf("a corrupt record ran %v, want %v", calls, want)
	}
	if v := c.Get(context.Background(), recordKey("k-3")).Val(); v != "hello" || runs.load() != 1 {
		t.Fatalf("the value became %q; %d handler runs", v, runs.load())
	}
}
