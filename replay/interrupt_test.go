package replay_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/replay"
)

// A handler that its replay's stop cuts short returns an error: its claim is given
// back without counting an attempt, so interrupting a replay never brings a key
// closer to exhaustion, and the resumed replay runs it again as attempt 1.
func TestInterruptedHandlerIsNotAnAttempt(t *testing.T) {
	store := redisStore(t, consumer.WithMaxAttempts(1))
	path := writeJSONL(t, `{"key":"k1","payload":"x"}`, `{"key":"k2","payload":"x"}`)
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	var ran []string
	h := func(hctx context.Context, m replay.Message) (int, error) {
		ran = append(ran, string(m.Key))
		if ctx.Err() == nil && m.Key == "k1" {
			interrupt() // an operator's Ctrl-C while k1's handler runs
			<-hctx.Done()
			return 0, fmt.Errorf("charge cut short: %w", context.Cause(hctx))
		}
		return 1, nil
	}
	rep, err := replay.Execute(ctx, store, openJSONL(t, path), h, replay.WithConcurrency(1))
	if !errors.Is(err, context.Canceled) || rep.Counts[replay.Error] != 2 {
		t.Fatalf("interrupted replay: %v, %v", err, rep.Counts)
	}
	rec, err := store.Peek(context.Background(), "k1")
	if err != nil || rec.State == "failed" || rec.Attempts != 0 {
		t.Fatalf("k1 after the interruption: %+v, %v", rec, err)
	}

	rep, err = replay.Execute(context.Background(), store, openJSONL(t, path), h, replay.WithConcurrency(1))
	if err != nil || rep.Counts[replay.Ran] != 2 || fmt.Sprint(ran) != "[k1 k1 k2]" {
		t.Fatalf("resumed: %v, %v, ran %v", err, rep.Counts, ran)
	}
	if rec, _ := store.Peek(context.Background(), "k1"); rec.State != "completed" || rec.Attempts != 1 {
		t.Fatalf("k1 after the resumed replay: %+v", rec)
	}
}
