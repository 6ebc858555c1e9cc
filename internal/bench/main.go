// Command bench measures idemkit's Redis paths in one run on one Redis server and
// prints one table (make bench). Lanes, all with a no-op handler:
//
//   - floor: two plain SETs per message (SET NX PX, then SET KEEPTTL), pipelined B
//     at a time: what any state machine on Redis costs at the least;
//   - seed-002 protocol: the acquire script and the release script of the
//     "idempotency with Redis and Lua" design, one message at a time (a hash per
//     key, EXISTS/HGET/HSET/EXPIRE), the reference for the single path;
//   - go-redis only: idemkit's own begin and complete scripts (SET IFEQ for the
//     completions where the server has it) called directly with pre-built
//     arguments, B records per call: the client cost of the commands idemkit
//     sends, without idemkit's Go code around them;
//   - ExecuteIdempotently, one message at a time;
//   - ExecuteBatch with B messages per call, on one goroutine, and on two at once
//     (two batches in flight);
//   - a consumer.Pipeline fed one message at a time, batching claims and
//     completions up to B from whatever waits, two calls of each in flight;
//   - ExecuteBatch (B at a time, B handlers at once) and the Pipeline with a 2 ms
//     handler instead of the no-op one: how well each batches its store calls
//     when handlers take time (claim and settle calls per message, counted by an
//     observer on the store those lanes share).
//
// CPU is read from getrusage for this process (Go, to the microsecond) and from
// /proc/<pid>/stat of redis-server (when it runs on this machine: the private one
// this program starts unless IDEMKIT_REDIS_ADDR names another); allocations from
// the Go runtime; commands are counted on the client. /proc/<pid>/stat counts in
// 10 ms ticks, so redis-server's CPU is also read from the scheduler's own count in
// nanoseconds (/proc/<pid>/task/*/schedstat), and its INFO commandstats give each
// command's time. Lanes run interleaved in slices, each slice in another order, and
// the whole is repeated (-reps), because this machine's speed varies; each lane's
// keys are deleted (unmeasured) once its slice is measured, so that every lane
// finds the same keyspace rather than one paying the rehash of a table the others
// filled. Then it measures Redis memory per completed record, beside a plain key of
// the same name length.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/benchkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lua"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
)

func main() {
	single := flag.Int("n", 20000, "messages per repetition for the one-at-a-time lanes")
	batched := flag.Int("batch-n", 200000, "messages per repetition for the batch lanes")
	size := flag.Int("b", 100, "batch size B")
	reps := flag.Int("reps", 3, "repetitions")
	records := flag.Int("records", 100000, "records for the memory measure")
	flag.Parse()
	if err := run(*single, *batched, *size, *reps, *records); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// rig is what every lane uses.
type rig struct {
	ctx    context.Context
	client *redis.Client
	admin  *redis.Client
	store  *redisstore.Store
	// counted is store with an observer counting claim and settle calls, for the
	// ExecuteBatch and Pipeline lanes.
	counted *redisstore.Store
	calls   *callCounter
	runner  *lua.Runner // for the go-redis only lane, loaded (and told whether SET takes IFEQ) once
	env     benchkit.Env
	run     string // unique per run, so keys never repeat
	b       int
}

func run(n, bn, b, reps, records int) error {
	ctx := context.Background()
	addr, where, stop, err := testenv.RedisForTool()
	if err != nil {
		return err
	}
	defer stop()
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 8})
	defer client.Close()
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	cnt := &testenv.CommandCounter{}
	client.AddHook(cnt)
	version, pid := benchkit.RedisInfo(ctx, admin)
	runID := strconv.FormatInt(time.Now().UnixNano(), 36)
	store, err := redisstore.NewStore(client, consumer.WithPrefix("idemkit-bench-"+runID), consumer.WithScope("bench"),
		redisstore.WithEvictionCheck(redisstore.EvictionIgnore))
	if err != nil {
		return err
	}
	if err := store.Load(ctx); err != nil {
		return err
	}
	calls := &callCounter{}
	counted, err := redisstore.NewStore(client, consumer.WithPrefix("idemkit-bench-"+runID), consumer.WithScope("bench"),
		redisstore.WithEvictionCheck(redisstore.EvictionIgnore), consumer.WithObserver(calls))
	if err != nil {
		return err
	}
	runner := lua.NewRunner(client)
	if err := runner.Load(ctx); err != nil {
		return err
	}
	r := &rig{ctx: ctx, client: client, admin: admin, store: store, counted: counted, calls: calls, runner: runner, env: benchkit.Env{ServerPid: pid, Calls: cnt},
		run: runID, b: b}
	if err := r.loadSeed(); err != nil {
		return err
	}
	fmt.Printf("idemkit bench: Redis %s (%s), no-op handler, B=%d, %d repetitions\n", version, where, b, reps)
	fmt.Printf("completions of fresh claims: %s\n", completionPath(ctx, admin))
	if pid < 0 {
		fmt.Println("(redis-server is not on this machine: its CPU is not measured)")
	}
	for rep := 1; rep <= reps; rep++ {
		if err := r.repetition(rep, n, bn); err != nil {
			return err
		}
	}
	if os.Getenv("IDEMKIT_REDIS_ADDR") != "" {
		// The memory measure empties the server (FLUSHALL) between its lanes: it
		// runs only on the server this program started for itself.
		fmt.Printf("\nRedis memory per record: not measured on a server named by IDEMKIT_REDIS_ADDR (the measure empties the server)\n")
		return nil
	}
	return r.memory(records)
}

// repetition runs every lane once, interleaved in slices, and prints its table.
func (r *rig) repetition(rep, n, bn int) error {
	const slices = 20 // short slices: every lane meets the machine's load alike
	b := r.b
	lanes := struct{ floor, seed, raw, single, batch, two, pipe, slowBatch, slowPipe benchkit.Lane }{
		benchkit.Lane{Name: fmt.Sprintf("floor: 2 SET per message, B=%d", b)},
		benchkit.Lane{Name: "seed-002 protocol, one at a time"},
		benchkit.Lane{Name: fmt.Sprintf("go-redis only: idemkit scripts, B=%d", b)},
		benchkit.Lane{Name: "ExecuteIdempotently"},
		benchkit.Lane{Name: fmt.Sprintf("ExecuteBatch B=%d", b)},
		benchkit.Lane{Name: fmt.Sprintf("ExecuteBatch B=%d, two in flight", b)},
		benchkit.Lane{Name: fmt.Sprintf("Pipeline, batches up to %d", b)},
		benchkit.Lane{Name: fmt.Sprintf("ExecuteBatch B=%d, 2 ms, %d at once", b, b)},
		benchkit.Lane{Name: "Pipeline, 2 ms handlers"},
	}
	var counts [9]callCount // by lane, in the order of the table
	var server [9]serverCost
	per, bper := n/slices, bn/slices/(2*b)*(2*b)
	sper := max(per/4/b, 1) * b // 2 ms lanes: 5,000 messages per repetition by default
	for s := 0; s < slices; s++ {
		tag := fmt.Sprintf("%d-%d", rep, s)
		type step struct {
			lane *benchkit.Lane
			msgs int
			keys []string // the lane's record keys, deleted once measured
			body func() error
		}
		plain := func(lane *benchkit.Lane, name string, msgs int, f func([]string) error) step {
			ks := r.recordKeys(keys(name, tag, msgs))
			return step{lane, msgs, ks, func() error { return f(ks) }}
		}
		keyed := func(lane *benchkit.Lane, name string, msgs int, f func([]consumer.Key) error) step {
			ks := keys(name, tag, msgs)
			return step{lane, msgs, r.recordKeys(ks), func() error { return f(ks) }}
		}
		steps := []step{
			plain(&lanes.floor, "floor", bper, r.floorLane),
			plain(&lanes.seed, "seed", per, r.seedLane),
			plain(&lanes.raw, "raw", bper, r.rawLane),
			keyed(&lanes.single, "single", per, r.singleLane),
			keyed(&lanes.batch, "batch", bper, func(ks []consumer.Key) error { return r.batchLane(ks, 1) }),
			keyed(&lanes.two, "two", bper, func(ks []consumer.Key) error { return r.batchLane(ks, 2) }),
			keyed(&lanes.pipe, "pipe", bper, func(ks []consumer.Key) error { return r.pipelineLane(ks, 0) }),
			keyed(&lanes.slowBatch, "slowbatch", sper, r.slowBatchLane),
			keyed(&lanes.slowPipe, "slowpipe", sper, func(ks []consumer.Key) error { return r.pipelineLane(ks, 2*time.Millisecond) }),
		}
		// Each slice runs the lanes in another order, so that none always follows
		// the same one.
		for j := range steps {
			i := (j + s) % len(steps)
			st := steps[i]
			before := r.calls.load()
			s0 := r.serverNow()
			if err := r.env.Measure(st.lane, st.msgs, st.body); err != nil {
				return err
			}
			server[i].add(r.serverNow(), s0)
			counts[i].add(r.calls.load(), before)
			// Every lane starts from the same database: a lane that made the
			// keyspace grow past a power of two would otherwise pay the rehash
			// (and the next lanes its lookups in a larger table).
			if err := r.forget(st.keys); err != nil {
				return err
			}
		}
	}
	fmt.Printf("\nrepetition %d\n", rep)
	benchkit.Table(os.Stdout, &lanes.floor, &lanes.floor, &lanes.seed, &lanes.raw, &lanes.single, &lanes.batch, &lanes.two, &lanes.pipe,
		&lanes.slowBatch, &lanes.slowPipe)
	l := &lanes
	fmt.Println()
	fmt.Println("  store calls per message (counted by an observer; Redis commands are in calls/msg):")
	for i, ln := range []*benchkit.Lane{&l.batch, &l.two, &l.pipe, &l.slowBatch, &l.slowPipe} {
		c := counts[i+4]
		fmt.Printf("    %-40s claim calls %.4f  settle calls %.4f  (%d settle calls)\n", ln.Name,
			float64(c.claims)/float64(ln.Msgs), float64(c.settles)/float64(ln.Msgs), c.settles)
	}
	fmt.Println()
	fmt.Println("  Redis per message: CPU by schedstat (all its threads, in ns), and INFO commandstats time by command")
	fmt.Println("  (a script's time includes the commands it calls, which commandstats also counts under their own names):")
	for i, ln := range []*benchkit.Lane{&l.floor, &l.raw, &l.batch, &l.two, &l.pipe} {
		sc := server[[]int{0, 2, 4, 5, 6}[i]]
		fmt.Printf("    %-40s CPU %6.2f us  %s\n", ln.Name, sc.perMsg(ln.Msgs), sc.commands(ln.Msgs))
	}
	fmt.Println()
	fmt.Printf("  pipeline Go CPU/msg <= 1.2x ExecuteBatch's:    %5.2fx  %s\n", ratio(l.pipe.PerMsg(l.pipe.GoCPU), l.batch.PerMsg(l.batch.GoCPU)),
		benchkit.Verdict(l.pipe.PerMsg(l.pipe.GoCPU) <= 1.2*l.batch.PerMsg(l.batch.GoCPU)))
	fmt.Printf("  pipeline allocations/msg <= ExecuteBatch's:    %5.1f   %s\n", l.pipe.AllocsPerMsg(), benchkit.Verdict(l.pipe.AllocsPerMsg() <= l.batch.AllocsPerMsg()))
	fmt.Printf("  batch Redis CPU/msg <= 1.3x the floor's:       %5.2fx  %s\n", ratio(l.batch.PerMsg(l.batch.ServerCPU), l.floor.PerMsg(l.floor.ServerCPU)),
		benchkit.Verdict(l.batch.PerMsg(l.batch.ServerCPU) <= 1.3*l.floor.PerMsg(l.floor.ServerCPU)))
	if fl, bt := server[0].perMsg(l.floor.Msgs), server[4].perMsg(l.batch.Msgs); fl > 0 {
		fmt.Printf("    the same, by schedstat (ns, no ticks):       %5.2fx  %s  (%.2f vs %.2f us/msg)\n", bt/fl,
			benchkit.Verdict(bt <= 1.3*fl), bt, fl)
	}
	fmt.Printf("  batch Go CPU/msg <= 2.5 us:                    %5.2f   %s\n", l.batch.PerMsg(l.batch.GoCPU), benchkit.Verdict(l.batch.PerMsg(l.batch.GoCPU) <= 2.5))
	fmt.Printf("  batch Go CPU/msg <= 1.3x go-redis only:        %5.2fx  %s\n", ratio(l.batch.PerMsg(l.batch.GoCPU), l.raw.PerMsg(l.raw.GoCPU)),
		benchkit.Verdict(l.batch.PerMsg(l.batch.GoCPU) <= 1.3*l.raw.PerMsg(l.raw.GoCPU)))
	fmt.Printf("  batch allocations/msg <= 8:                    %5.1f   %s\n", l.batch.AllocsPerMsg(), benchkit.Verdict(l.batch.AllocsPerMsg() <= 8))
	fmt.Printf("  batch bytes/msg <= 1 KB:                       %5.0f   %s\n", l.batch.BytesPerMsg(), benchkit.Verdict(l.batch.BytesPerMsg() <= 1024))
	fmt.Printf("  ExecuteIdempotently >= 1.0x seed-002 msgs/s:   %5.2fx  %s\n", l.single.Rate()/l.seed.Rate(), benchkit.Verdict(l.single.Rate() >= l.seed.Rate()))
	fmt.Printf("  two in flight >= 1.5x one batch msgs/s:        %5.2fx  %s\n", l.two.Rate()/l.batch.Rate(), benchkit.Verdict(l.two.Rate() >= 1.5*l.batch.Rate()))
	fmt.Printf("  pipeline >= 1.5x one batch msgs/s:             %5.2fx  %s\n", l.pipe.Rate()/l.batch.Rate(), benchkit.Verdict(l.pipe.Rate() >= 1.5*l.batch.Rate()))
	return nil
}

// completionPath says how this server completes fresh claims: SET IFEQ when SET
// documents the IFEQ condition (Redis 8.4+, Valkey 8.1+), else the complete script.
func completionPath(ctx context.Context, c *redis.Client) string {
	docs, err := c.Do(ctx, "command", "docs", "set").Result()
	if err == nil && strings.Contains(fmt.Sprint(docs), "IFEQ") {
		return "SET IFEQ KEEPTTL, no script (the server has SET IFEQ)"
	}
	return "the complete script (the server has no SET IFEQ: Redis before 8.4, Valkey before 8.1)"
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// serverStats is what the server had spent at one moment: CPU time from
// /proc/<pid>/task/*/schedstat (nanoseconds, not 10 ms ticks; zero when
// redis-server is not on this machine) and INFO commandstats (calls and
// microseconds by command).
type serverStats struct {
	cpu   time.Duration
	calls map[string]int64
	usec  map[string]int64
}

// serverCost sums serverStats differences over a lane's slices.
type serverCost struct {
	cpu   time.Duration
	calls map[string]int64
	usec  map[string]int64
}

func (c *serverCost) add(now, before serverStats) {
	if c.calls == nil {
		c.calls, c.usec = map[string]int64{}, map[string]int64{}
	}
	c.cpu += now.cpu - before.cpu
	for k, v := range now.calls {
		if k == "info" { // the measure's own
			continue
		}
		if d := v - before.calls[k]; d > 0 {
			c.calls[k] += d
			c.usec[k] += now.usec[k] - before.usec[k]
		}
	}
}

// perMsg is the CPU time per message in microseconds.
func (c *serverCost) perMsg(msgs int) float64 {
	if msgs == 0 {
		return 0
	}
	return float64(c.cpu.Nanoseconds()) / 1e3 / float64(msgs)
}

// commands lists the commands' time per message, the costliest first, each with
// its time per call and calls per message.
func (c *serverCost) commands(msgs int) string {
	if msgs == 0 || len(c.usec) == 0 {
		return ""
	}
	names := make([]string, 0, len(c.usec))
	for k := range c.usec {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return c.usec[names[i]] > c.usec[names[j]] })
	var sb strings.Builder
	for _, k := range names {
		fmt.Fprintf(&sb, "  %s %.2f us (%.2f us/call, %.3f calls)", k, float64(c.usec[k])/float64(msgs),
			float64(c.usec[k])/float64(c.calls[k]), float64(c.calls[k])/float64(msgs))
	}
	return sb.String()
}

// serverNow reads the server's CPU time and command statistics.
func (r *rig) serverNow() serverStats {
	st := serverStats{cpu: benchkit.SchedCPU(r.env.ServerPid), calls: map[string]int64{}, usec: map[string]int64{}}
	info, err := r.admin.Info(r.ctx, "commandstats").Result()
	if err != nil {
		return st
	}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, found := strings.CutPrefix(name, "cmdstat_")
		if !ok || !found {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				st.calls[name] = n
			case "usec":
				st.usec[name] = n
			}
		}
	}
	return st
}

// forget deletes a measured lane's keys (unmeasured), a thousand per command.
func (r *rig) forget(keys []string) error {
	for lo := 0; lo < len(keys); lo += 1000 {
		if err := r.admin.Del(r.ctx, keys[lo:min(lo+1000, len(keys))]...).Err(); err != nil {
			return err
		}
	}
	return nil
}
