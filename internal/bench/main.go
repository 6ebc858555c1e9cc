// Command bench measures idemkit's Redis paths against their floor, in one run on
// one Redis server, and prints one table (make bench).
//
// Paths, all with a no-op handler on one goroutine:
//   - floor: the begin and complete scripts called directly, two EVALSHA round trips
//     per message, no idemkit Go code around them;
//   - single: ExecuteIdempotently per message;
//   - batch: ExecuteBatch with B messages per call.
//
// Redis calls are counted on the client (every command sent, pipelined ones each);
// Redis CPU is the usec that INFO commandstats gives the script commands (EVALSHA,
// EVAL), which include the commands the scripts run. The server is a private
// redis-server unless IDEMKIT_REDIS_ADDR names one (its stats are reset).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lua"
	"github.com/redis/go-redis/v9"
)

type measure struct {
	name     string
	messages int
	elapsed  time.Duration
	calls    int64
	cpuUsec  float64
}

func (m measure) rate() float64        { return float64(m.messages) / m.elapsed.Seconds() }
func (m measure) callsPerMsg() float64 { return float64(m.calls) / float64(m.messages) }
func (m measure) cpuPerMsg() float64   { return m.cpuUsec / float64(m.messages) }

func main() {
	single := flag.Int("n", 20000, "messages for the floor and the single path")
	batched := flag.Int("batch-n", 200000, "messages for the batch path")
	size := flag.Int("b", 100, "batch size B")
	flag.Parse()
	if err := run(*single, *batched, *size); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(n, bn, b int) error {
	ctx := context.Background()
	addr, where, stop, err := testenv.RedisForTool()
	if err != nil {
		return err
	}
	defer stop()
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	cnt := &testenv.CommandCounter{}
	client.AddHook(cnt)
	version, err := serverVersion(ctx, admin)
	if err != nil {
		return err
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	store, err := consumer.NewRedisStore(client, consumer.WithPrefix("idemkit-bench-"+run), consumer.WithScope("bench"))
	if err != nil {
		return err
	}
	if err := store.Load(ctx); err != nil {
		return err
	}
	ns := uuid.New()
	payload := []byte(`{"order":42,"amount":1999}`)
	noop := func(ctx context.Context) (struct{}, error) { return struct{}{}, nil }

	// Each path runs in `rounds` slices, interleaved, so that the machine's noise
	// falls on all of them alike.
	const rounds = 10
	paths := []*measure{
		{name: "floor: 2 EVALSHA per message"},
		{name: "ExecuteIdempotently"},
		{name: fmt.Sprintf("ExecuteBatch B=%d", b)},
	}
	measureIt := func(m *measure, msgs int, body func() error) error {
		if err := admin.ConfigResetStat(ctx).Err(); err != nil {
			return err
		}
		cnt.Reset()
		start := time.Now()
		if err := body(); err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		m.elapsed += time.Since(start)
		m.messages += msgs
		m.calls += cnt.Load()
		usec, err := scriptUsec(ctx, admin)
		m.cpuUsec += usec
		return err
	}

	// Warm up connections and the server.
	for i := 0; i < 2000; i++ {
		consumer.ExecuteIdempotently(ctx, store, consumer.NewKey(ns, "warm", strconv.Itoa(i)), payload, noop)
	}

	lease, ret := int64(30000), int64(86400000)
	items := make([]consumer.BatchItem, b)
	h := func(ctx context.Context, i int, it consumer.BatchItem) (struct{}, error) { return struct{}{}, nil }
	per, bper := n/rounds, bn/rounds/b*b
	for r := 0; r < rounds; r++ {
		err := measureIt(paths[0], per, func() error {
			for i := r * per; i < (r+1)*per; i++ {
				key := store.RecordKey(consumer.NewKey(ns, "floor", strconv.Itoa(i)))
				owner := "bench-owner-" + strconv.Itoa(i)
				if err := client.EvalSha(ctx, lua.BeginScript.Hash(), []string{key}, lease, ret, 5, owner, "", "0").Err(); err != nil {
					return err
				}
				if err := client.EvalSha(ctx, lua.CompleteScript.Hash(), []string{key}, ret, owner, "{}", "").Err(); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		err = measureIt(paths[1], per, func() error {
			for i := r * per; i < (r+1)*per; i++ {
				r := consumer.ExecuteIdempotently(ctx, store, consumer.NewKey(ns, "single", strconv.Itoa(i)), payload, noop)
				if r.Outcome != consumer.Success {
					return fmt.Errorf("message %d: %v %v", i, r.Outcome, r.Err)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		err = measureIt(paths[2], bper, func() error {
			for start := r * bper; start < (r+1)*bper; start += b {
				for i := range items {
					items[i] = consumer.BatchItem{Key: consumer.NewKey(ns, "batch", strconv.Itoa(start+i)), Payload: payload}
				}
				for i, res := range consumer.ExecuteBatch(ctx, store, items, h) {
					if res.Outcome != consumer.Success {
						return fmt.Errorf("message %d: %v %v", start+i, res.Outcome, res.Err)
					}
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	floor, one, batch := *paths[0], *paths[1], *paths[2]

	fmt.Printf("idemkit bench: Redis %s (%s), one goroutine, no-op handler\n\n", version, where)
	fmt.Printf("%-32s %9s %11s %9s %15s %16s\n", "path", "messages", "msgs/s", "vs floor", "Redis calls/msg", "Redis CPU us/msg")
	for _, m := range []measure{floor, one, batch} {
		fmt.Printf("%-32s %9d %11.0f %8.2fx %15.3f %16.2f\n", m.name, m.messages, m.rate(), m.rate()/floor.rate(),
			m.callsPerMsg(), m.cpuPerMsg())
	}
	check := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	fmt.Println()
	fmt.Printf("single path >= 0.9x floor:            %5.2fx  %s\n", one.rate()/floor.rate(), check(one.rate() >= 0.9*floor.rate()))
	fmt.Printf("batch path >= 5x single path:         %5.2fx  %s\n", batch.rate()/one.rate(), check(batch.rate() >= 5*one.rate()))
	limit := 2/float64(b) + 0.01
	fmt.Printf("batch Redis calls/msg <= %.3f:        %5.3f   %s\n", limit, batch.callsPerMsg(), check(batch.callsPerMsg() <= limit))
	fmt.Printf("batch Redis CPU <= 5 us/msg:          %5.2f   %s\n", batch.cpuPerMsg(), check(batch.cpuPerMsg() <= 5))
	return nil
}

func serverVersion(ctx context.Context, c *redis.Client) (string, error) {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "unknown", nil
}

// scriptUsec sums the usec of the script commands in INFO commandstats.
func scriptUsec(ctx context.Context, c *redis.Client) (float64, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		for _, field := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(field, "usec="); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return 0, err
				}
				total += f
			}
		}
	}
	return total, nil
}
