// Command http measures the Idempotency-Key middleware (adapters/nethttp) on
// loopback against the same handler without it, in one process, on one Redis
// (make bench-http). Lanes, one client goroutine with keep-alive, a trivial
// handler (201 and a 40-byte JSON body):
//
//   - baseline: the handler without the middleware (the request still carries a key);
//   - first: the middleware with a new key per request (claim, handler, completion);
//   - replay: the keys of the first lane sent again (the stored response);
//   - peer replay: the reference for a replay, what the Idempotency-Key
//     middlewares this is compared with do per replay: one GET of the stored
//     response, decoded and sent (peerMiddleware, a minimal one of that kind);
//   - floor: no HTTP at all, a claim and a completion through package lua (the
//     two Redis round trips a first request cannot avoid), for reference.
//
// For each lane: p50 and p99 latency seen by the client, Redis commands per
// request (counted by a go-redis hook on the lanes' client), this process's CPU
// per request (client, server and middleware together, from /proc/self/stat),
// and the Redis server's CPU per request two ways: the redis-server process's
// CPU time (from /proc/<pid>/task/*/schedstat, in nanoseconds, when it runs on
// this machine) and the time its commands took to execute (INFO commandstats,
// usec; a script's commands count inside its EVALSHA and again under their own
// names, so the column is exact only for lanes that run no script, as replays
// now do). Lanes run in interleaved slices so that the machine's noise falls on
// all of them alike; the whole measurement is repeated (-reps, default 3).
//
// The targets: a replay sends one Redis command, a GET (no script), and costs
// Redis no more CPU than the peer's replay. idemkit's record is a little larger
// than the peer's stored response (the 32 bytes of record header and
// fingerprint, the response headers as lists, a 43-character hashed key where the
// peer keeps the client's key): the same one command moves some more bytes.
//
// Redis is a private redis-server unless IDEMKIT_REDIS_ADDR names one.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idemkit/adapters/nethttp"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lua"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times (100 on Linux).
const clockTicks = 100

type lane struct {
	name      string
	lat       []time.Duration
	commands  int64
	cpu       time.Duration // this process
	redisCPU  time.Duration // the redis-server process
	redisExec time.Duration // its commands' execution (INFO commandstats)
}

func (l *lane) pct(p float64) time.Duration {
	s := slices.Clone(l.lat)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func (l *lane) perReq(d time.Duration) float64 {
	return float64(d.Nanoseconds()) / 1e3 / float64(len(l.lat))
}

func main() {
	n := flag.Int("n", 5000, "requests per lane and repetition")
	nslices := flag.Int("slices", 10, "interleaved slices per repetition")
	reps := flag.Int("reps", 3, "repetitions")
	flag.Parse()
	if err := run(*n, *nslices, *reps); err != nil {
		fmt.Fprintln(os.Stderr, "bench-http:", err)
		os.Exit(1)
	}
}

func run(n, nslices, reps int) error {
	ctx := context.Background()
	addr, where, stop, err := testenv.RedisForTool()
	if err != nil {
		return err
	}
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	cnt := &testenv.CommandCounter{}
	rdb.AddHook(cnt)
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	version, redisPID := serverInfo(ctx, admin)

	stamp := strconv.FormatInt(time.Now().UnixNano(), 36)
	store, err := redisstore.NewStore(rdb, consumer.WithPrefix("idemkit-bench-http-"+stamp), consumer.WithScope("bench"))
	if err != nil {
		return err
	}
	if err := store.Load(ctx); err != nil {
		return err
	}
	mw, err := nethttp.New(store, nethttp.WithScope(nethttp.Unscoped))
	if err != nil {
		return err
	}
	body := []byte(`{"id":"ch_1","amount":4200,"currency":"eur"}`)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/charges/ch_1")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	})
	baseURL, closeBase, err := listen(handler)
	if err != nil {
		return err
	}
	defer closeBase()
	guardedURL, closeGuarded, err := listen(mw.Handler(handler))
	if err != nil {
		return err
	}
	defer closeGuarded()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer client.CloseIdleConnections()
	reqBody := []byte(`{"amount":4200,"currency":"eur"}`)
	post := func(url, key string) error {
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(reqBody))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(nethttp.HeaderKey, `"`+key+`"`)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	peerURL, closePeer, err := listen(peerMiddleware(rdb, "idemkit-bench-peer-"+stamp, handler))
	if err != nil {
		return err
	}
	defer closePeer()
	run := lua.NewRunner(rdb)
	if err := run.Load(ctx); err != nil {
		return err
	}
	// Warm up connections, scripts and code paths.
	for i := 0; i < 2000; i++ {
		k := "warm-" + stamp + "-" + strconv.Itoa(i)
		for _, u := range []string{baseURL, guardedURL, guardedURL, peerURL, peerURL} {
			if err := post(u, k); err != nil {
				return fmt.Errorf("warm-up: %w", err)
			}
		}
		if err := floor(ctx, run, store, k); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}

	fmt.Printf("idemkit HTTP bench: Redis %s (%s), loopback, one client goroutine, trivial handler, %d requests per lane x %d repetitions\n",
		version, where, n, reps)
	type summary struct {
		overheadP50, overheadP99, floorP99, firstRT, replayRT, replayVsBase float64
		replayCPU, peerCPU, replayExec, peerExec                            float64
	}
	var sums []summary
	for rep := 1; rep <= reps; rep++ {
		lanes := []*lane{{name: "baseline (no middleware)"}, {name: "first request"}, {name: "replayed request"},
			{name: "peer replay: one GET"}, {name: "floor: claim+complete, no HTTP"}}
		per := n / nslices
		for sl := 0; sl < nslices; sl++ {
			keys := make([]string, per)
			for i := range keys {
				keys[i] = fmt.Sprintf("bench-%s-%d-%d-%d", stamp, rep, sl, i)
			}
			for _, k := range keys { // the peer's first requests, not measured: its replays are
				if err := post(peerURL, k); err != nil {
					return fmt.Errorf("peer first request: %w", err)
				}
			}
			for li, l := range lanes {
				var send func(k string) error
				switch li {
				case 0:
					send = func(k string) error { return post(baseURL, k) }
				case 1, 2:
					send = func(k string) error { return post(guardedURL, k) }
				case 3:
					send = func(k string) error { return post(peerURL, k) }
				default:
					send = func(k string) error { return floor(ctx, run, store, k) }
				}
				cnt.Reset()
				exec0, err := commandUsec(ctx, admin)
				if err != nil {
					return err
				}
				cpu0, rcpu0 := cpuTime(0), schedCPU(redisPID)
				for _, k := range keys {
					t0 := time.Now()
					if err := send(k); err != nil {
						return fmt.Errorf("%s: %w", l.name, err)
					}
					l.lat = append(l.lat, time.Since(t0))
				}
				l.cpu += cpuTime(0) - cpu0
				l.redisCPU += schedCPU(redisPID) - rcpu0
				l.commands += cnt.Load()
				exec1, err := commandUsec(ctx, admin)
				if err != nil {
					return err
				}
				l.redisExec += exec1 - exec0
			}
		}
		fmt.Printf("\nrepetition %d\n", rep)
		fmt.Printf("%-31s %8s %8s %15s %11s %17s %18s\n", "lane", "p50 us", "p99 us", "Redis cmds/req", "CPU us/req",
			"Redis CPU us/req", "Redis exec us/req")
		for _, l := range lanes {
			rc := "n/a"
			if redisPID > 0 {
				rc = fmt.Sprintf("%.2f", l.perReq(l.redisCPU))
			}
			fmt.Printf("%-31s %8d %8d %15.2f %11.1f %17s %18.2f\n", l.name, l.pct(0.50).Microseconds(), l.pct(0.99).Microseconds(),
				float64(l.commands)/float64(len(l.lat)), l.perReq(l.cpu), rc, l.perReq(l.redisExec))
		}
		base, first, replay, peer, fl := lanes[0], lanes[1], lanes[2], lanes[3], lanes[4]
		sums = append(sums, summary{
			overheadP50:  float64((first.pct(0.50) - base.pct(0.50)).Microseconds()),
			overheadP99:  float64((first.pct(0.99) - base.pct(0.99)).Microseconds()),
			floorP99:     float64(fl.pct(0.99).Microseconds()),
			firstRT:      float64(first.commands) / float64(len(first.lat)),
			replayRT:     float64(replay.commands) / float64(len(replay.lat)),
			replayVsBase: float64(replay.pct(0.50)) / float64(base.pct(0.50)),
			replayCPU:    replay.perReq(replay.redisCPU),
			peerCPU:      peer.perReq(peer.redisCPU),
			replayExec:   replay.perReq(replay.redisExec),
			peerExec:     peer.perReq(peer.redisExec),
		})
	}
	check := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	fmt.Println("\ntargets, per repetition:")
	for i, s := range sums {
		fmt.Printf("  rep %d: first request sends %.2f Redis commands; its p99 overhead %.0f us (< 1000 us: %s), p50 overhead %.0f us;\n",
			i+1, s.firstRT, s.overheadP99, check(s.overheadP99 < 1000), s.overheadP50)
		fmt.Printf("         the claim and completion alone (floor lane) take %.0f us at p99\n", s.floorP99)
		fmt.Printf("         a replay sends %.2f Redis commands (= 1: %s); replay p50 / baseline p50 = %.2f\n",
			s.replayRT, check(s.replayRT > 0.999 && s.replayRT < 1.001), s.replayVsBase)
		if redisPID > 0 {
			fmt.Printf("         Redis CPU per replay %.2f us, the peer's %.2f us: %.2fx (<= 1: %s)\n",
				s.replayCPU, s.peerCPU, ratio(s.replayCPU, s.peerCPU), check(s.replayCPU <= s.peerCPU))
		}
		fmt.Printf("         Redis command time per replay %.2f us, the peer's %.2f us: %.2fx (<= 1: %s)\n",
			s.replayExec, s.peerExec, ratio(s.replayExec, s.peerExec), check(s.replayExec <= s.peerExec))
	}
	return nil
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// floor claims and completes key through package lua, as a first request's two
// round trips do, without HTTP or the middleware.
func floor(ctx context.Context, run *lua.Runner, store *redisstore.Store, key string) error {
	rk := store.RecordKey(consumer.Key("floor-" + key))
	s := store.Settings()
	now := time.Now().Unix()
	claims := []lua.BeginItem{{Key: rk, Owner: "bench-" + key}}
	reps := make([]lua.BeginReply, 1)
	run.Begin(ctx, lua.BeginArgs{Lease: s.Lease, Retention: s.Retention, MaxAttempts: s.MaxAttempts, Now: now},
		lua.Claims{Items: claims, Replies: reps})
	if reps[0].Err != nil || reps[0].Code != lua.Acquired {
		return fmt.Errorf("floor claim: %+v", reps[0])
	}
	acks := make([]lua.AckReply, 1)
	run.Settle(ctx, lua.SettleArgs{MaxAttempts: s.MaxAttempts, Now: now, Retention: s.Retention}, lua.Settlements{
		Items: []lua.SettleItem{{Key: rk, Owner: claims[0].Owner, Fence: reps[0].Fence, Attempts: reps[0].Attempts,
			Created: reps[0].Created, Complete: true, Result: []byte(`{"status":201}`)}},
		Replies: acks})
	if acks[0].Err != nil || acks[0].Ack != lua.AckOK {
		return fmt.Errorf("floor completion: %+v", acks[0])
	}
	return nil
}

// peerMiddleware is the reference for a replay: an Idempotency-Key middleware of
// the kind idemkit is compared with, reduced to what it does per request. It
// reads the stored response with one GET; found, it sends it; else it runs the
// handler and stores the response with SET NX (no lock, no fingerprint, no
// state machine: only the replay is measured against it).
func peerMiddleware(rdb *redis.Client, prefix string, next http.Handler) http.Handler {
	type stored struct {
		Status      int    `json:"status"`
		ContentType string `json:"content_type"`
		Location    string `json:"location"`
		Body        []byte `json:"body"`
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := prefix + ":{" + r.Header.Get(nethttp.HeaderKey) + "}"
		if v, err := rdb.Get(r.Context(), key).Bytes(); err == nil {
			var st stored
			if err := json.Unmarshal(v, &st); err == nil {
				w.Header().Set("Content-Type", st.ContentType)
				w.Header().Set("Location", st.Location)
				w.Header().Set("Idempotent-Replayed", "true")
				w.WriteHeader(st.Status)
				_, _ = w.Write(st.Body)
				return
			}
		}
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		res := rec.Result()
		body := rec.Body.Bytes()
		v, _ := json.Marshal(stored{Status: res.StatusCode, ContentType: res.Header.Get("Content-Type"),
			Location: res.Header.Get("Location"), Body: body})
		_ = rdb.SetNX(r.Context(), key, v, 24*time.Hour).Err()
		for k, vs := range res.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(res.StatusCode)
		_, _ = w.Write(body)
	})
}

// listen serves h on a loopback port.
func listen(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "bench-http: serve:", err)
		}
	}()
	return "http://" + ln.Addr().String() + "/charges", func() {
		_ = srv.Close()
		<-done
	}, nil
}

// cpuTime is the user+system CPU time of process pid (0: this one) from
// /proc/<pid>/stat, or 0 when it cannot be read.
func cpuTime(pid int) time.Duration {
	path := "/proc/self/stat"
	if pid > 0 {
		path = "/proc/" + strconv.Itoa(pid) + "/stat"
	} else if pid < 0 {
		return 0
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces) start after the last ')'.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / clockTicks
}

// schedCPU is the CPU time of every thread of process pid, from
// /proc/<pid>/task/*/schedstat (nanoseconds, unlike /proc/<pid>/stat's 10 ms
// ticks, too coarse for a few microseconds per request), or 0 when it cannot be
// read.
func schedCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var total time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			ns, _ := strconv.ParseInt(f[0], 10, 64)
			total += time.Duration(ns)
		}
	}
	return total
}

// commandUsec is the time Redis spent executing commands (INFO commandstats,
// usec summed over every command but INFO).
func commandUsec(ctx context.Context, c *redis.Client) (time.Duration, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				total += n
			}
		}
	}
	return time.Duration(total) * time.Microsecond, nil
}

// serverInfo returns Redis's version and its process id when it runs on this
// machine (-1 otherwise).
func serverInfo(ctx context.Context, c *redis.Client) (string, int) {
	version, pid := "unknown", -1
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return version, pid
	}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "redis_version:"); ok {
			version = v
		}
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			if p, err := strconv.Atoi(v); err == nil {
				if _, err := os.Stat("/proc/" + v); err == nil {
					pid = p
				}
			}
		}
	}
	return version, pid
}
