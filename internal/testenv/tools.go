package testenv

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisForTool gives a program outside the tests (a benchmark) a Redis address:
// IDEMKIT_REDIS_ADDR when set, else a private redis-server that stop ends.
func RedisForTool() (addr, where string, stop func(), err error) {
	if a := os.Getenv("IDEMKIT_REDIS_ADDR"); a != "" {
		return a, "IDEMKIT_REDIS_ADDR", func() {}, nil
	}
	srv, err := StartRedis()
	if err != nil {
		return "", "", nil, fmt.Errorf("no Redis: set IDEMKIT_REDIS_ADDR or install redis-server: %w", err)
	}
	return srv.Addr, "private redis-server", srv.Close, nil
}

// CommandCounter is a go-redis hook that counts the commands a client sends, each
// command of a pipeline on its own, and the round trips (a pipeline is one).
type CommandCounter struct{ n, trips atomic.Int64 }

var _ redis.Hook = (*CommandCounter)(nil)

// Load returns the count; Reset sets it to zero.
func (c *CommandCounter) Load() int64 { return c.n.Load() }

// RoundTrips returns the round trips counted.
func (c *CommandCounter) RoundTrips() int64 { return c.trips.Load() }

// Reset sets the counts to zero.
func (c *CommandCounter) Reset() { c.n.Store(0); c.trips.Store(0) }

// DialHook passes dials through.
func (c *CommandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts one command.
func (c *CommandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); c.trips.Add(1); return next(ctx, cmd) }
}

// ProcessPipelineHook counts every command of a pipeline.
func (c *CommandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		c.trips.Add(1)
		return next(ctx, cmds)
	}
}

// Eventually polls ok every 50ms until it holds, failing t after within.
func Eventually(t testing.TB, within time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for: %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TimeUntil starts run, waits until count reaches n, stops run and returns how long
// it took to get there; it gives up after limit.
func TimeUntil(run func(ctx context.Context) error, count func() int64, n int64, limit time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- run(ctx) }()
	for count() < n {
		if time.Since(start) > limit {
			cancel()
			<-done
			return 0, fmt.Errorf("only %d of %d settled after %v", count(), n, limit)
		}
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	cancel()
	return elapsed, <-done
}
