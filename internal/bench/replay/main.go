// Command replay measures the operator plane on one private redis-server (make
// bench-replay):
//
//   - plan over -keys keys (default 1,000,000; -existing of them with completed
//     records): wall time, Redis CPU, and the latency another client sees meanwhile
//     (a PING every millisecond from a process of its own: worst and p99, beside
//     the same probe on the idle server, and the server's own slowlog);
//   - stats over the same records (bounded SCAN steps), with the same PING probe;
//   - replay throughput against the engine it runs on, a consumer.Pipeline alone,
//     on fresh keys of the same shape (the replay's batch size as the Pipeline's
//     window and largest call, the same handlers, no-op handler), interleaved in
//     slices and repeated -reps times, with Go and Redis CPU per message from /proc.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"time"

	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/benchkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/replay"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
)

func main() {
	keys := flag.Int("keys", 1_000_000, "keys the plan reads")
	existing := flag.Int("existing", 600_000, "of them, keys with a completed record")
	n := flag.Int("n", 100_000, "messages per lane and repetition in the throughput comparison")
	reps := flag.Int("reps", 3, "repetitions of the throughput comparison")
	batch := flag.Int("batch", 500, "batch size")
	conc := flag.Int("concurrency", 16, "handlers at once")
	probeAddr := flag.String("probe", "", "internal: run as the PING probe process against this address")
	flag.Parse()
	if *probeAddr != "" {
		probeMain(*probeAddr)
		return
	}
	if err := run(*keys, *existing, *n, *reps, *batch, *conc); err != nil {
		fmt.Fprintln(os.Stderr, "bench-replay:", err)
		os.Exit(1)
	}
}

// synthetic is a Source of count messages with keys <tag>-<i>.
type synthetic struct {
	tag       string
	next, end int
}

func (s *synthetic) Read(_ context.Context, max int) ([]replay.Message, error) {
	if s.next >= s.end {
		return nil, io.EOF
	}
	out := make([]replay.Message, 0, min(max, s.end-s.next))
	for ; s.next < s.end && len(out) < max; s.next++ {
		out = append(out, replay.Message{Key: key(s.tag, s.next), Payload: payload, Offset: int64(s.next)})
	}
	return out, nil
}
func (s *synthetic) Close() error { return nil }

var payload = []byte(`{"order":42,"amount":1999}`)

func key(tag string, i int) consumer.Key { return consumer.Key(tag + "-" + strconv.Itoa(i)) }

// probe is a child process that PINGs the server every millisecond on its own
// connection, so that the latency it sees is the server's and the machine's, not
// this process's goroutine scheduling.
type probe struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startProbe(addr string) *probe {
	cmd := exec.Command(os.Args[0], "-probe", addr)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	p := &probe{cmd: cmd, in: in, out: bufio.NewReader(out)}
	_, _ = p.out.ReadString('\n') // "ready"
	return p
}

// end stops the probe and returns the worst and p99 latency of its PINGs.
func (p *probe) end() (worst, p99 time.Duration, n int) {
	_ = p.in.Close()
	line, _ := p.out.ReadString('\n')
	_ = p.cmd.Wait()
	var w, q int64
	fmt.Sscan(line, &w, &q, &n)
	return time.Duration(w), time.Duration(q), n
}

func probeMain(addr string) {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
	defer c.Close()
	_ = c.Ping(context.Background()).Err()
	stop := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(stop) }()
	fmt.Println("ready")
	var lat []time.Duration
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			slices.Sort(lat)
			if len(lat) == 0 {
				fmt.Println(0, 0, 0)
				return
			}
			fmt.Println(int64(lat[len(lat)-1]), int64(lat[len(lat)*99/100]), len(lat))
			return
		case <-t.C:
		}
		s := time.Now()
		_ = c.Ping(context.Background()).Err()
		lat = append(lat, time.Since(s))
	}
}

func run(keys, existing, n, reps, batch, conc int) error {
	ctx := context.Background()
	addr, where, stop, err := testenv.RedisForTool()
	if err != nil {
		return err
	}
	defer stop()
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 8})
	defer client.Close()
	version, pid := benchkit.RedisInfo(ctx, client)
	runID := strconv.FormatInt(time.Now().UnixNano(), 36)
	store, err := redisstore.NewStore(client, consumer.WithPrefix("idemkit-bench-"+runID), consumer.WithScope("bench"),
		redisstore.WithEvictionCheck(redisstore.EvictionIgnore), consumer.WithCallTimeout(30*time.Second))
	if err != nil {
		return err
	}
	fmt.Printf("bench-replay: Redis %s (%s), batch %d, concurrency %d\n", version, where, batch, conc)
	if pid < 0 {
		fmt.Println("(redis-server is not on this machine: its CPU is not measured)")
	}

	// Records for the plan: the first `existing` keys completed.
	noop := func(context.Context, int, consumer.BatchItem) (struct{}, error) { return struct{}{}, nil }
	t0 := time.Now()
	for lo := 0; lo < existing; lo += 1000 {
		items := make([]consumer.BatchItem, 0, 1000)
		for i := lo; i < min(lo+1000, existing); i++ {
			items = append(items, consumer.BatchItem{Key: key("plan", i), Payload: payload})
		}
		for _, r := range consumer.ExecuteBatch(ctx, store, items, noop) {
			if r.Outcome != consumer.Success {
				return fmt.Errorf("fill: %v", r.Err)
			}
		}
	}
	fmt.Printf("filled %d completed records in %s\n\n", existing, time.Since(t0).Truncate(time.Millisecond))

	private := where == "private redis-server"
	if private { // the server's own view: every command slower than 500 us is logged
		client.ConfigSet(ctx, "slowlog-log-slower-than", "500")
	}
	idle := startProbe(addr)
	time.Sleep(3 * time.Second)
	worst, p99, pings := idle.end()
	fmt.Printf("idle server, the same PING probe (%d of them): worst %s, p99 %s\n", pings, worst.Truncate(time.Microsecond), p99.Truncate(time.Microsecond))

	client.SlowLogReset(ctx)
	s0 := benchkit.CPUTime(pid)
	g0 := benchkit.CPUTime(0)
	p := startProbe(addr)
	start := time.Now()
	plan, err := replay.Plan(ctx, store, &synthetic{tag: "plan", end: keys}, replay.WithBatchSize(1000))
	el := time.Since(start)
	worst, p99, pings = p.end()
	if err != nil {
		return err
	}
	fmt.Printf("plan over %d keys: %s (%.0f keys/s); Redis CPU %s (%.2f us/key), Go CPU %s\n", plan.Messages, el.Truncate(time.Millisecond),
		float64(plan.Messages)/el.Seconds(), (benchkit.CPUTime(pid) - s0), float64((benchkit.CPUTime(pid)-s0).Nanoseconds())/1e3/float64(plan.Messages),
		benchkit.CPUTime(0)-g0)
	fmt.Printf("  verdicts: %v\n", plan.Counts)
	fmt.Printf("  concurrent PING (%d of them): worst %s, p99 %s\n", pings, worst.Truncate(time.Microsecond), p99.Truncate(time.Microsecond))
	slowest(ctx, client, private)

	client.SlowLogReset(ctx)
	in, err := admin.New(store)
	if err != nil {
		return err
	}
	s0 = benchkit.CPUTime(pid)
	p = startProbe(addr)
	start = time.Now()
	st, err := in.Stats(ctx, admin.StatsQuery{Scope: "bench"})
	el = time.Since(start)
	worst, p99, pings = p.end()
	if err != nil {
		return err
	}
	fmt.Printf("stats over %d records (SCAN COUNT 1000 + GET/PTTL pipelines): %s; Redis CPU %s\n", st.Records, el.Truncate(time.Millisecond),
		benchkit.CPUTime(pid)-s0)
	fmt.Printf("  concurrent PING (%d of them): worst %s, p99 %s\n", pings, worst.Truncate(time.Microsecond), p99.Truncate(time.Microsecond))
	slowest(ctx, client, private)
	fmt.Println()

	env := benchkit.Env{ServerPid: pid}
	const slices = 5
	per := n / slices / batch * batch
	for rep := 1; rep <= reps; rep++ {
		base := benchkit.Lane{Name: fmt.Sprintf("Pipeline alone, window %d, handlers %d", batch, conc)}
		rl := benchkit.Lane{Name: "replay.Execute, same batch and concurrency"}
		for s := 0; s < slices; s++ {
			tag := fmt.Sprintf("r%d-s%d", rep, s)
			items := make([]consumer.BatchItem, per)
			for i := range items {
				items[i] = consumer.BatchItem{Key: key("base-"+tag, i), Payload: payload}
			}
			if err := env.Measure(&base, per, func() error { return pipelineAlone(ctx, store, items, batch, conc) }); err != nil {
				return err
			}
			if err := env.Measure(&rl, per, func() error {
				rep, err := replay.Execute(ctx, store, &synthetic{tag: "replay-" + tag, end: per},
					func(context.Context, replay.Message) (struct{}, error) { return struct{}{}, nil },
					replay.WithBatchSize(batch), replay.WithConcurrency(conc))
				if err == nil && rep.Counts[replay.Ran] != per {
					err = errors.New("replay ran " + strconv.Itoa(rep.Counts[replay.Ran]))
				}
				return err
			}); err != nil {
				return err
			}
		}
		fmt.Printf("repetition %d\n", rep)
		benchkit.Table(os.Stdout, &base, &base, &rl)
		fmt.Printf("  replay >= 0.8x the Pipeline alone: %.2fx %s\n\n", rl.Rate()/base.Rate(), benchkit.Verdict(rl.Rate() >= 0.8*base.Rate()))
	}
	return nil
}

// pipelineAlone runs items through a Pipeline with a no-op handler, submitting as
// the window allows, and waits for every result.
func pipelineAlone(ctx context.Context, store consumer.Store, items []consumer.BatchItem, window, handlers int) error {
	p, err := consumer.NewPipeline[struct{}](ctx, store, consumer.WithInFlight(window), consumer.WithMaxBatch(window),
		consumer.WithConcurrency(handlers))
	if err != nil {
		return err
	}
	defer func() { _ = p.Shutdown(ctx) }()
	results := make(chan consumer.Result[struct{}], len(items))
	for _, it := range items {
		err := p.Submit(ctx, consumer.PipelineItem[struct{}]{Key: it.Key, Payload: it.Payload,
			Run:  func(context.Context) (struct{}, error) { return struct{}{}, nil },
			Done: func(r consumer.Result[struct{}]) { results <- r }})
		if err != nil {
			return err
		}
	}
	for range items {
		if r := <-results; r.Outcome != consumer.Success {
			return fmt.Errorf("pipeline: %v", r.Err)
		}
	}
	return nil
}

// slowest prints the slowest commands the server ran since the last SLOWLOG RESET.
func slowest(ctx context.Context, c *redis.Client, private bool) {
	if !private {
		return
	}
	logs, err := c.SlowLogGet(ctx, 128).Result()
	if err != nil {
		fmt.Println("  slowlog:", err)
		return
	}
	var worst time.Duration
	name := "-"
	for _, l := range logs {
		if l.Duration > worst && (len(l.Args) == 0 || l.Args[0] != "slowlog") {
			worst, name = l.Duration, fmt.Sprint(l.Args[0])
		}
	}
	fmt.Printf("  server's slowlog: %d commands over 500 us, the slowest %s (%s)\n", len(logs), worst, name)
}
