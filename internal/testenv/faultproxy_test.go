package testenv_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { testenv.Run(m) }

// Each fault is seen by a real client the way a user's worker would see it.
func TestFaultProxy(t *testing.T) {
	px := testenv.NewFaultProxy(t, testenv.RedisAddr(t))
	c := redis.NewClient(&redis.Options{Addr: px.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer c.Close()
	ctx := context.Background()
	key := testenv.Prefix(t) + ":n"

	if err := c.Incr(ctx, key).Err(); err != nil {
		t.Fatalf("pass: %v", err)
	}

	px.Blackhole()
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := c.Incr(cctx, key).Err()
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err) {
		t.Fatalf("blackholed call: want a timeout, got %v", err)
	}
	px.Pass()
	if err := c.Ping(ctx).Err(); err != nil { // a pooled connection, so the next reply is INCR's
		t.Fatal(err)
	}

	px.DropNextReply()
	if err := c.Incr(ctx, key).Err(); err == nil {
		t.Fatal("a dropped reply must fail the call")
	}
	// The command ran although its reply was lost (and the timed-out INCR ran once
	// the partition healed): 1 + 1 + 1.
	testenv.Eventually(t, 2*time.Second, "counter at 3", func() bool {
		n, err := c.Get(ctx, key).Int()
		return err == nil && n == 3
	})

	px.SetDelay(50 * time.Millisecond)
	start := time.Now()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Fatalf("delayed round trip took %v, want at least 2 x 50ms", took)
	}
	px.SetDelay(0)

	px.Refuse()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("a refusing proxy must fail calls")
	}
	px.Pass()

	px.Reset()
	_ = c.Ping(ctx).Err() // may fail once on the killed connection
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("after a reset new connections work: %v", err)
	}
}

func isTimeout(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) && ne.Timeout()
}
