package replay_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/replay"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
)

// The store is cut off (blackholed) after the first batch: Execute stops at the
// batch whose claims the store did not answer, with an error matching
// consumer.ErrStoreUnavailable, instead of reading the rest of the source into
// ERRORs; the checkpoint holds what settled. The partition held the second
// batch's claims back and delivers them when it heals, so those keys are held by
// an owner that is gone until their lease runs out; resumed replays run the rest
// at once and those two then, each message once in all.
func TestExecuteStopsWhenTheStoreDoesNotAnswer(t *testing.T) {
	ctx := context.Background()
	proxy := testenv.NewFaultProxy(t, testenv.RedisAddr(t))
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	store, err := redisstore.NewStore(client, consumer.WithPrefix(testenv.Prefix(t)), consumer.WithScope("payments"),
		consumer.WithCallTimeout(500*time.Millisecond), consumer.WithLease(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for i := 1; i <= 10; i++ {
		lines = append(lines, fmt.Sprintf(`{"key":"k%02d","payload":"x"}`, i))
	}
	path := writeJSONL(t, lines...)
	cp := replay.FileCheckpoint(filepath.Join(t.TempDir(), "cp.json"))
	runs := map[string]int{}
	h := func(_ context.Context, m replay.Message) (int, error) { runs[string(m.Key)]++; return 1, nil }

	// The engine reads and claims ahead while messages run, so the cut is made
	// between the first batch and the second at the source: the second read waits
	// until the first batch is reported, and the store is cut off then.
	src := &gated{JSONLSource: openJSONL(t, path), open: make(chan struct{})}
	cut := replay.WithProgress(func(p replay.Progress) {
		if p.Read == 2 && !p.Final {
			proxy.Blackhole()
			close(src.open)
		}
	})
	rep, err := replay.Execute(ctx, store, src, h, cut, replay.WithCheckpoint(cp),
		replay.WithBatchSize(2), replay.WithConcurrency(1))
	if !errors.Is(err, consumer.ErrStoreUnavailable) {
		t.Fatalf("execution cut off from the store: %v (%+v)", err, rep.Counts)
	}
	if rep.Read != 4 || rep.Counts[replay.Ran] != 2 || rep.Counts[replay.Error] != 2 || len(runs) != 2 || rep.Checkpoint.Next[""] != 3 {
		t.Fatalf("execution cut off from the store: read %d, %v, ran %v, checkpoint %v", rep.Read, rep.Counts, runs, rep.Checkpoint.Next)
	}
	if saved, err := cp.Load(); err != nil || saved.Next[""] != 3 {
		t.Fatalf("saved checkpoint: %+v, %v", saved, err)
	}

	proxy.Pass()
	testenv.Eventually(t, 60*time.Second, "a resumed replay settles every message", func() bool {
		rep, err = replay.Execute(ctx, store, openJSONL(t, path), h, replay.WithCheckpoint(cp), replay.WithBatchSize(2), replay.WithConcurrency(1))
		if err != nil || rep.Skipped < 2 || rep.Counts[replay.Error] != 0 {
			t.Fatalf("resumed: %+v, %v", rep, err)
		}
		return rep.Checkpoint.Next[""] == 11
	})
	for i := 1; i <= 10; i++ {
		if k := fmt.Sprintf("k%02d", i); runs[k] != 1 {
			t.Fatalf("%s ran %d times: %v", k, runs[k], runs)
		}
	}
}

// gated is a JSONL source whose second read waits until open is closed.
type gated struct {
	*replay.JSONLSource
	reads int
	open  chan struct{}
}

func (g *gated) Read(ctx context.Context, max int) ([]replay.Message, error) {
	if g.reads++; g.reads == 2 {
		select {
		case <-g.open:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.JSONLSource.Read(ctx, max)
}
