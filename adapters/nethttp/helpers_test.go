package nethttp_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/nethttp"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/memory"
	redisstore "github.com/idemkit/idemkit/store/redis"
)

func TestMain(m *testing.M) {
	if helperMain() {
		return
	}
	testenv.Run(m)
}

// storeFactory builds a store with the given options on top of the test's defaults.
type storeFactory func(t *testing.T, opts ...consumer.Option) consumer.Store

// stores are the stores every behaviour test runs on.
var stores = []struct {
	name string
	new  storeFactory
}{
	{"redis", redisStore},
	{"memory", memoryStore},
}

func redisStore(t *testing.T, opts ...consumer.Option) consumer.Store {
	t.Helper()
	c := testenv.Redis(t)
	s, err := redisstore.NewStore(c, append([]consumer.Option{consumer.WithPrefix(testenv.Prefix(t)),
		consumer.WithScope("payments")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func memoryStore(t *testing.T, opts ...consumer.Option) consumer.Store {
	t.Helper()
	s, err := memory.NewStore(append([]consumer.Option{consumer.WithScope("payments")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// eachStore runs f as a subtest on every store.
func eachStore(t *testing.T, f func(t *testing.T, newStore storeFactory)) {
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) { f(t, s.new) })
	}
}

// server is a real http.Server on loopback with the middleware in front of a handler.
type server struct {
	URL    string
	client *http.Client
	mw     *nethttp.Middleware
}

// serve starts h behind the middleware on a loopback port, closed when t ends.
func serve(t *testing.T, store consumer.Store, h http.Handler, opts ...nethttp.Option) *server {
	t.Helper()
	mw, err := nethttp.New(store, append([]nethttp.Option{nethttp.WithScope(userScope)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Handler(h))
	tr := &http.Transport{MaxIdleConnsPerHost: 256}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
	})
	return &server{URL: srv.URL, client: &http.Client{Transport: tr, Timeout: 30 * time.Second}, mw: mw}
}

// userScope takes the client's identity from X-User (standing in for an
// authentication middleware).
func userScope(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil }

// reply is a response read whole.
type reply struct {
	Status int
	Header http.Header
	Body   string
}

func (r reply) problem(t *testing.T) nethttp.Problem {
	t.Helper()
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("status %d with Content-Type %q, want application/problem+json; body %s", r.Status, ct, r.Body)
	}
	var p nethttp.Problem
	if err := json.Unmarshal([]byte(r.Body), &p); err != nil {
		t.Fatalf("problem body %q: %v", r.Body, err)
	}
	if p.Status != r.Status {
		t.Fatalf("problem status %d in a %d response", p.Status, r.Status)
	}
	return p
}

// req is one request; Key is the raw header value ("" for none).
type req struct {
	Method string
	Path   string
	Key    string
	Body   string
	Header map[string]string
}

func (s *server) do(t *testing.T, q req) reply {
	t.Helper()
	r, err := s.send(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (s *server) send(ctx context.Context, q req) (reply, error) {
	if q.Method == "" {
		q.Method = http.MethodPost
	}
	if q.Path == "" {
		q.Path = "/charges"
	}
	hr, err := http.NewRequestWithContext(ctx, q.Method, s.URL+q.Path, strings.NewReader(q.Body))
	if err != nil {
		return reply{}, err
	}
	if q.Key != "" {
		hr.Header.Set(nethttp.HeaderKey, q.Key)
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("X-User", "alice")
	for k, v := range q.Header {
		hr.Header.Set(k, v)
	}
	resp, err := s.client.Do(hr)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}, nil
}

// quoted is an sf-string of k.
func quoted(k string) string { return `"` + k + `"` }

// counter counts handler runs.
type counter struct{ n atomic.Int64 }

func (c *counter) load() int { return int(c.n.Load()) }

// chargeHandler creates a "charge": 201, a Location, a Set-Cookie and a JSON body
// that names the attempt, so replays can be told from runs.
func chargeHandler(runs *counter) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.n.Add(1)
		info, _ := consumer.InfoFromContext(r.Context())
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Location", "/charges/ch_"+itoa(n))
		w.Header().Set("Content-Location", "/charges/ch_"+itoa(n))
		w.Header().Set("ETag", `"v`+itoa(n)+`"`)
		w.Header().Set("Last-Modified", "Wed, 21 Oct 2015 07:28:00 GMT")
		w.Header().Set("Link", `</charges>; rel="collection"`)
		w.Header().Set("Set-Cookie", "session=secret-"+itoa(n))
		w.Header().Set("X-Internal", "not-replayed")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"charge": "ch_" + itoa(n), "attempt": info.Attempt,
			"fence": info.Fence, "request": string(body)})
	})
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// startPrivateRedis starts a redis-server for t alone, which the test may stop.
func startPrivateRedis(t *testing.T) *testenv.Server { return testenv.RedisServer(t) }

// privateStore is a store on a private server.
func privateStore(t *testing.T, srv *testenv.Server, opts ...consumer.Option) consumer.Store {
	t.Helper()
	s, err := redisstore.NewStore(srv.Client(t), append([]consumer.Option{consumer.WithScope("payments")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// goDo sends q from a goroutine; the reply arrives on the channel (a zero reply
// after reporting the error when the request failed).
func (s *server) goDo(t *testing.T, q req) <-chan reply {
	out := make(chan reply, 1)
	go func() {
		r, err := s.send(context.Background(), q)
		if err != nil {
			t.Error(err)
		}
		out <- r
	}()
	return out
}

// goDoErr sends q from a goroutine and reports only its error.
func (s *server) goDoErr(q req) <-chan error {
	out := make(chan error, 1)
	go func() {
		_, err := s.send(context.Background(), q)
		out <- err
	}()
	return out
}
