package replay_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/benchkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/replay"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
)

// BenchmarkExecuteJSONL replays a JSON Lines file of fresh keys against Redis with
// the default options (every message runs): 20,000 messages through a no-op
// handler, and 5,000 through a handler that takes 2 ms (an I/O call). One op is one
// whole replay; it reports messages per second and this process's CPU (user +
// system, from /proc/self/stat) per message. Run it with -benchtime=1x and
// -count for repetitions; the machine's speed varies, so compare lanes run
// interleaved, never figures from different days.
func BenchmarkExecuteJSONL(b *testing.B) {
	for _, c := range []struct {
		name string
		n    int
		work time.Duration
	}{{"noop-20000", 20000, 0}, {"2ms-5000", 5000, 2 * time.Millisecond}} {
		b.Run(c.name, func(b *testing.B) {
			client := testenv.Redis(b)
			prefix := testenv.Prefix(b)
			b.Cleanup(func() { unlinkPrefix(client, prefix) })
			store, err := redisstore.NewStore(client, consumer.WithPrefix(prefix), consumer.WithScope("bench"),
				redisstore.WithEvictionCheck(redisstore.EvictionIgnore))
			if err != nil {
				b.Fatal(err)
			}
			h := func(ctx context.Context, _ replay.Message) (struct{}, error) {
				if c.work > 0 {
					t := time.NewTimer(c.work)
					defer t.Stop()
					select {
					case <-t.C:
					case <-ctx.Done():
						return struct{}{}, ctx.Err()
					}
				}
				return struct{}{}, nil
			}
			var elapsed, cpu time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				path := benchFile(b, c.n, fmt.Sprintf("run%d", i))
				src, err := replay.OpenJSONL(path)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				cpu0, t0 := benchkit.CPUTime(0), time.Now()
				rep, err := replay.Execute(context.Background(), store, src, h)
				elapsed += time.Since(t0)
				cpu += benchkit.CPUTime(0) - cpu0
				_ = src.Close()
				if err != nil || rep.Counts[replay.Ran] != c.n {
					b.Fatalf("replay: %v, %v", err, rep.Counts)
				}
			}
			msgs := float64(b.N * c.n)
			b.ReportMetric(msgs/elapsed.Seconds(), "msgs/s")
			b.ReportMetric(float64(cpu.Microseconds())/msgs, "cpu-us/msg")
		})
	}
}

// benchFile writes n messages with keys unique to tag.
func benchFile(b *testing.B, n int, tag string) string {
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, `{"key":"%s-%d","payload":{"order":%d,"amount":1999}}`+"\n", tag, i, i)
	}
	p := filepath.Join(b.TempDir(), tag+".jsonl")
	if err := os.WriteFile(p, []byte(sb.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	return p
}

// unlinkPrefix removes the benchmark's records from the shared server.
func unlinkPrefix(c *redis.Client, prefix string) {
	ctx := context.Background()
	it := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for it.Next(ctx) {
		keys = append(keys, it.Val())
		if len(keys) == 1000 {
			c.Unlink(ctx, keys...)
			keys = keys[:0]
		}
	}
	if len(keys) > 0 {
		c.Unlink(ctx, keys...)
	}
}
