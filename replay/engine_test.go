package replay_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/replay"
	"github.com/redis/go-redis/v9"
)

// Messages run as a stream: those after a slow one run while it does, but the
// checkpoint never passes it while its outcome is not final. Here line 2's handler
// waits until line 5's has run (which a replay that waited for each batch to end
// would never reach, with batches of two), then fails retryably: lines 3 to 6 ran,
// the checkpoint stays at line 2, and the resumed replay runs line 2 alone.
func TestCheckpointNeverPassesAnUnsettledMessage(t *testing.T) {
	ctx := context.Background()
	store := redisStore(t)
	path := writeJSONL(t, `{"key":"k1","payload":"x"}`, `{"key":"k2","payload":"x"}`, `{"key":"k3","payload":"x"}`,
		`{"key":"k4","payload":"x"}`, `{"key":"k5","payload":"x"}`, `{"key":"k6","payload":"x"}`)
	cp := &savedCheckpoints{}
	k5ran := make(chan struct{})
	var mu sync.Mutex
	runs := map[string]int{}
	fail := true
	h := func(ctx context.Context, m replay.Message) (int, error) {
		mu.Lock()
		runs[string(m.Key)]++
		mu.Unlock()
		switch {
		case m.Key == "k5":
			close(k5ran)
		case m.Key == "k2" && fail:
			select {
			case <-k5ran:
				return 0, errors.New("upstream timeout")
			case <-time.After(30 * time.Second): // a guard, not a measure: k5 never ran
				return 0, consumer.Permanent(errors.New("k5 never ran while k2 waited"))
			}
		}
		return 1, nil
	}
	rep, err := replay.Execute(ctx, store, openJSONL(t, path), h, replay.WithCheckpoint(cp), replay.WithBatchSize(2), replay.WithConcurrency(2))
	if err != nil || rep.Counts[replay.Ran] != 5 || rep.Counts[replay.Error] != 1 || len(rep.Counts) != 2 || rep.Read != 6 {
		t.Fatalf("first run: %v, %+v", err, rep)
	}
	if rep.Checkpoint.Next[""] != 2 || len(cp.saved) == 0 {
		t.Fatalf("checkpoint %v, saved %v", rep.Checkpoint.Next, cp.saved)
	}
	for _, c := range cp.saved {
		if c.Next[""] != 2 {
			t.Fatalf("a checkpoint past the unsettled line 2 was saved: %v", cp.saved)
		}
	}

	fail = false
	rep, err = replay.Execute(ctx, store, openJSONL(t, path), h, replay.WithCheckpoint(cp), replay.WithBatchSize(2), replay.WithConcurrency(2))
	if err != nil || rep.Skipped != 1 || rep.Counts[replay.Ran] != 1 || rep.Counts[replay.Duplicate] != 4 || rep.Checkpoint.Next[""] != 7 {
		t.Fatalf("resumed: %v, %+v", err, rep)
	}
	if fmt.Sprint(runs) != "map[k1:1 k2:2 k3:1 k4:1 k5:1 k6:1]" {
		t.Fatalf("handler runs: %v", runs)
	}
}

// savedCheckpoints keeps every checkpoint saved.
type savedCheckpoints struct{ saved []replay.Checkpoint }

func (s *savedCheckpoints) Load() (replay.Checkpoint, error) {
	if len(s.saved) == 0 {
		return replay.Checkpoint{}, nil
	}
	return s.saved[len(s.saved)-1], nil
}

func (s *savedCheckpoints) Save(c replay.Checkpoint) error {
	next := map[string]int64{}
	for p, o := range c.Next {
		next[p] = o
	}
	s.saved = append(s.saved, replay.Checkpoint{Source: c.Source, Next: next})
	return nil
}

// inProgressSeen tells when a replay finds a key in progress.
type inProgressSeen chan struct{}

func (c inProgressSeen) OnOutcome(e consumer.OutcomeEvent) {
	if e.Source == "replay" && e.Outcome == consumer.InProgress {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// A key another worker is running is IN_PROGRESS, and holds the checkpoint before
// it while the messages after it run; with the store's WithWaitInProgress the
// replay looks again until that run ends, and finds it DUPLICATE.
func TestInProgressElsewhere(t *testing.T) {
	for _, wait := range []bool{false, true} {
		t.Run(fmt.Sprintf("wait=%v", wait), func(t *testing.T) {
			ctx := context.Background()
			seen := make(inProgressSeen, 1)
			opts := []consumer.Option{consumer.WithObserver(seen)}
			if wait {
				opts = append(opts, consumer.WithWaitInProgress(time.Minute))
			}
			store := redisStore(t, opts...)
			started, release := make(chan struct{}), make(chan struct{})
			holder := make(chan consumer.Result[int], 1)
			go func() {
				holder <- consumer.ExecuteIdempotently(ctx, store, "k1", []byte("x"), func(context.Context) (int, error) {
					close(started)
					<-release
					return 7, nil
				})
			}()
			<-started
			path := writeJSONL(t, `{"key":"k1","payload":"x"}`, `{"key":"k2","payload":"x"}`)
			var ran []string
			type result struct {
				rep replay.Report
				err error
			}
			done := make(chan result, 1)
			src := openJSONL(t, path)
			go func() {
				rep, err := replay.Execute(ctx, store, src, func(_ context.Context, m replay.Message) (int, error) {
					ran = append(ran, string(m.Key))
					return 1, nil
				}, replay.WithConcurrency(1))
				done <- result{rep, err}
			}()
			select {
			case <-seen:
			case <-time.After(30 * time.Second):
				t.Fatal("the replay never found k1 in progress")
			}
			close(release)
			if r := <-holder; r.Outcome != consumer.Success {
				t.Fatalf("the other worker's run: %v %v", r.Outcome, r.Err)
			}
			r := <-done
			want := map[replay.Verdict]int{replay.InProgress: 1, replay.Ran: 1}
			wantNext, ok := int64(0), false
			if wait {
				want, wantNext, ok = map[replay.Verdict]int{replay.Duplicate: 1, replay.Ran: 1}, 3, true
			}
			if next, has := r.rep.Checkpoint.Next[""]; r.err != nil || fmt.Sprint(r.rep.Counts) != fmt.Sprint(want) ||
				next != wantNext || has != ok || fmt.Sprint(ran) != "[k2]" {
				t.Fatalf("replay: %v, %v, checkpoint %v, ran %v", r.err, r.rep.Counts, r.rep.Checkpoint.Next, ran)
			}
		})
	}
}

// A store with WithLock runs each message under its key's lock, one at a time in
// source order; a second replay finds every key done.
func TestExecuteUnderLocks(t *testing.T) {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	l, err := lock.New([]redis.UniversalClient{client})
	if err != nil {
		t.Fatal(err)
	}
	store := redisStore(t, consumer.WithLock(l))
	complete(t, store, []consumer.Key{"k0"}, func(consumer.Key) []byte { return []byte("x") })
	path := writeJSONL(t, `{"key":"k0","payload":"x"}`, `{"key":"k1","payload":"x"}`, `{"key":"k2","payload":"x"}`,
		`{"key":"k1","payload":"x"}`, `{"key":"k3","payload":"x"}`)
	var mu sync.Mutex
	var ran []string
	h := func(_ context.Context, m replay.Message) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, string(m.Key))
		return 1, nil
	}
	cp := replay.FileCheckpoint(filepath.Join(t.TempDir(), "cp.json"))
	rep, err := replay.Execute(ctx, store, openJSONL(t, path), h, replay.WithCheckpoint(cp))
	if err != nil || rep.Counts[replay.Ran] != 3 || rep.Counts[replay.Duplicate] != 2 || fmt.Sprint(ran) != "[k1 k2 k3]" ||
		rep.Checkpoint.Next[""] != 6 {
		t.Fatalf("replay under locks: %v, %v, ran %v, checkpoint %v", err, rep.Counts, ran, rep.Checkpoint.Next)
	}
	rep, err = replay.Execute(ctx, store, openJSONL(t, path), h)
	if err != nil || rep.Counts[replay.Duplicate] != 5 || len(ran) != 3 {
		t.Fatalf("second replay: %v, %v, ran %v", err, rep.Counts, ran)
	}
}

// A progress callback that panics stops Execute with the panic and leaves no
// goroutine of the replay or its engine behind (the package's tests end with a leak
// check); the messages handed over settle first.
func TestPanicInACallbackLeaksNothing(t *testing.T) {
	store := redisStore(t)
	path := writeJSONL(t, `{"key":"k1","payload":"x"}`, `{"key":"k2","payload":"x"}`, `{"key":"k3","payload":"x"}`)
	var ran sync.Map
	h := func(_ context.Context, m replay.Message) (int, error) { ran.Store(m.Key, true); return 1, nil }
	func() {
		defer func() {
			if r := recover(); r != "progress broke" {
				t.Fatalf("recovered %v", r)
			}
		}()
		_, _ = replay.Execute(context.Background(), store, openJSONL(t, path), h, replay.WithBatchSize(1),
			replay.WithProgress(func(replay.Progress) { panic("progress broke") }))
		t.Fatal("Execute returned")
	}()
	rec, err := store.Peek(context.Background(), "k1")
	if err != nil || rec.State != "completed" {
		t.Fatalf("k1: %+v, %v", rec, err)
	}
}
