// Command http measures the Idempotency-Key middleware (adapters/nethttp) on
// loopback against the same handler without it, in one process, on one Redis
// (make bench-http). Three lanes, one client goroutine with keep-alive, a trivial
// handler (201 and a 40-byte JSON body):
//
//   - baseline: the handler without the middleware (the request still carries a key);
//   - first: the middleware with a new key per request (claim, handler, completion);
//   - replay: the keys of the first lane sent again (the stored response);
//   - floor: no HTTP at all, the begin and complete scripts called directly (the two
//     Redis round trips a first request cannot avoid), for reference.
//
// For each lane: p50 and p99 latency seen by the client, Redis commands per
// request (counted by a go-redis hook on the store's client), this process's CPU
// per request (client, server and middleware together, from /proc/self/stat) and
// the redis-server's CPU per request (from /proc/<pid>/stat, when it runs on this
// machine). Lanes run in interleaved slices so that the machine's noise falls on
// all of them alike; the whole measurement is repeated (-reps, default 3).
//
// Redis is a private redis-server unless IDEMKIT_REDIS_ADDR names one.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
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
	name     string
	lat      []time.Duration
	commands int64
	cpu      time.Duration // this process
	redisCPU time.Duration
}

func (l *lane) pct(p float64) time.Duration {
	s := slices.Clone(l.lat)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func (l *lane) perReq(d time.Duration) float64 {
	return float64(d.Microseconds()) / float64(len(l.lat))
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
	// Warm up connections, scripts and code paths.
	for i := 0; i < 2000; i++ {
		k := "warm-" + stamp + "-" + strconv.Itoa(i)
		for _, u := range []string{baseURL, guardedURL, guardedURL} {
			if err := post(u, k); err != nil {
				return fmt.Errorf("warm-up: %w", err)
			}
		}
	}

	fmt.Printf("idemkit HTTP bench: Redis %s (%s), loopback, one client goroutine, trivial handler, %d requests per lane x %d repetitions\n",
		version, where, n, reps)
	type summary struct{ overheadP50, overheadP99, floorP99, firstRT, replayRT, replayVsBase float64 }
	var sums []summary
	for rep := 1; rep <= reps; rep++ {
		lanes := []*lane{{name: "baseline (no middleware)"}, {name: "first request"}, {name: "replayed request"},
			{name: "floor: 2 EVALSHA, no HTTP"}}
		per := n / nslices
		for s := 0; s < nslices; s++ {
			keys := make([]string, per)
			for i := range keys {
				keys[i] = fmt.Sprintf("bench-%s-%d-%d-%d", stamp, rep, s, i)
			}
			for li, l := range lanes {
				url := baseURL
				if li > 0 {
					url = guardedURL
				}
				send := func(k string) error { return post(url, k) }
				if li == 3 {
					send = func(k string) error { return floor(ctx, rdb, store, k) }
				}
				cnt.Reset()
				cpu0, rcpu0 := cpuTime(0), cpuTime(redisPID)
				for _, k := range keys {
					t0 := time.Now()
					if err := send(k); err != nil {
						return fmt.Errorf("%s: %w", l.name, err)
					}
					l.lat = append(l.lat, time.Since(t0))
				}
				l.cpu += cpuTime(0) - cpu0
				l.redisCPU += cpuTime(redisPID) - rcpu0
				l.commands += cnt.Load()
			}
		}
		fmt.Printf("\nrepetition %d\n", rep)
		fmt.Printf("%-26s %9s %9s %15s %14s %16s\n", "lane", "p50 us", "p99 us", "Redis cmds/req", "CPU us/req", "Redis CPU us/req")
		for _, l := range lanes {
			rc := "n/a"
			if redisPID > 0 {
				rc = fmt.Sprintf("%.1f", l.perReq(l.redisCPU))
			}
			fmt.Printf("%-26s %9d %9d %15.2f %14.1f %16s\n", l.name, l.pct(0.50).Microseconds(), l.pct(0.99).Microseconds(),
				float64(l.commands)/float64(len(l.lat)), l.perReq(l.cpu), rc)
		}
		base, first, replay, fl := lanes[0], lanes[1], lanes[2], lanes[3]
		sums = append(sums, summary{
			overheadP50:  float64((first.pct(0.50) - base.pct(0.50)).Microseconds()),
			overheadP99:  float64((first.pct(0.99) - base.pct(0.99)).Microseconds()),
			floorP99:     float64(fl.pct(0.99).Microseconds()),
			firstRT:      float64(first.commands) / float64(len(first.lat)),
			replayRT:     float64(replay.commands) / float64(len(replay.lat)),
			replayVsBase: float64(replay.pct(0.50)) / float64(base.pct(0.50)),
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
		fmt.Printf("  rep %d: first request adds %.2f round trips (<= 2: %s); its p99 overhead %.0f us (< 1000 us: %s), p50 overhead %.0f us;\n",
			i+1, s.firstRT, check(s.firstRT <= 2.001), s.overheadP99, check(s.overheadP99 < 1000), s.overheadP50)
		fmt.Printf("         the two round trips alone (floor lane) take %.0f us at p99\n", s.floorP99)
		fmt.Printf("         a replay costs %.2f round trips (= 1: %s); replay p50 / baseline p50 = %.2f\n",
			s.replayRT, check(s.replayRT > 0.999 && s.replayRT < 1.001), s.replayVsBase)
	}
	return nil
}

// floor claims and completes key with the scripts directly, as a first request's
// two round trips do, without HTTP or the middleware.
func floor(ctx context.Context, rdb *redis.Client, store *redisstore.Store, key string) error {
	rk := store.RecordKey(consumer.Key("floor-" + key))
	owner := "bench-" + key
	if err := rdb.EvalSha(ctx, lua.BeginScript.Hash(), []string{rk}, 30000, 86400000, 5, owner, "", "0").Err(); err != nil {
		return err
	}
	return rdb.EvalSha(ctx, lua.CompleteScript.Hash(), []string{rk}, 86400000, owner, `{"status":201}`, "").Err()
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
