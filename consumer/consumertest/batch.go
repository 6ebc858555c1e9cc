package consumertest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
)

// ExecuteBatch.

func testBatch(t *testing.T, f Factory) {
	s := must(t, f)
	ctx := context.Background()
	// Five keys already done before the batch.
	for i := 0; i < 5; i++ {
		expect(t, consumer.ExecuteIdempotently(ctx, s, key("batch", fmt.Sprint(i)), []byte(fmt.Sprint(i)),
			func(ctx context.Context) (string, error) { return fmt.Sprint("before-", i), nil }), consumer.Success, nil)
	}
	var items []consumer.BatchItem
	for i := 0; i < 100; i++ {
		items = append(items, consumer.BatchItem{Key: key("batch", fmt.Sprint(i)), Payload: []byte(fmt.Sprint(i))})
	}
	items = append(items, items[10], items[2])                                              // repeats within the batch
	items = append(items, consumer.BatchItem{Key: items[20].Key, Payload: []byte("other")}) // conflicting repeat
	items = append(items, consumer.BatchItem{Key: ""})                                      // invalid
	var order []int
	runs := map[consumer.Key]int{}
	fn := func(ctx context.Context, i int, it consumer.BatchItem) (string, error) {
		order = append(order, i)
		runs[it.Key]++
		info, _ := consumer.InfoFromContext(ctx)
		if info.Key != it.Key || info.Fence != 1 {
			return "", fmt.Errorf("info %+v for item %d", info, i)
		}
		if i == 50 {
			return "", consumer.Permanent(errors.New("bad row"))
		}
		return "v" + string(it.Payload), nil
	}
	res := consumer.ExecuteBatch(ctx, s, items, fn)
	if len(res) != len(items) {
		t.Fatalf("%d results for %d items", len(res), len(items))
	}
	for i := 1; i < len(order); i++ {
		if order[i] <= order[i-1] {
			t.Fatalf("handlers ran out of input order: %v", order)
		}
	}
	if len(order) != 95 {
		t.Fatalf("%d handlers ran, want 95 (100 keys, 5 done before)", len(order))
	}
	for k, n := range runs {
		if n != 1 {
			t.Fatalf("key %s ran %d times", k, n)
		}
	}
	for i := 0; i < 100; i++ {
		r := res[i]
		switch {
		case i < 5:
			expect(t, r, consumer.Duplicate, nil)
			if r.Value != fmt.Sprint("before-", i) {
				t.Fatalf("item %d: %q", i, r.Value)
			}
		case i == 50:
			expect(t, r, consumer.Error, consumer.ErrPermanent)
		default:
			expect(t, r, consumer.Success, nil)
			if r.Value != fmt.Sprint("v", i) || r.Key != items[i].Key {
				t.Fatalf("item %d: %+v", i, r)
			}
		}
	}
	expect(t, res[100], consumer.Duplicate, nil)
	if res[100].Value != "v10" {
		t.Fatalf("in-batch repeat value %q", res[100].Value)
	}
	expect(t, res[101], consumer.Duplicate, nil)
	expect(t, res[102], consumer.Error, consumer.ErrPayloadConflict)
	expect(t, res[103], consumer.Error, consumer.ErrInvalidKey)

	again := consumer.ExecuteBatch(ctx, s, items[:100], fn)
	for i, r := range again {
		if r.Outcome != consumer.Duplicate {
			t.Fatalf("second batch item %d: %v %v", i, r.Outcome, r.Err)
		}
	}
	if len(order) != 95 {
		t.Fatalf("second batch ran %d handlers", len(order)-95)
	}
}

func testBatchConcurrent(t *testing.T, f Factory) {
	s := must(t, f)
	ctx := context.Background()
	var items []consumer.BatchItem
	for i := 0; i < 200; i++ {
		items = append(items, consumer.BatchItem{Key: key("conc", fmt.Sprint(i))})
	}
	var runs, running, peak atomic.Int32
	fn := func(ctx context.Context, i int, it consumer.BatchItem) (int, error) {
		runs.Add(1)
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(time.Millisecond)
		running.Add(-1)
		return i, nil
	}
	res := consumer.ExecuteBatch(ctx, s, items, fn, consumer.WithConcurrency(8), consumer.WithPerMessageCompletion(true))
	for i, r := range res {
		expect(t, r, consumer.Success, nil)
		if r.Value != i {
			t.Fatalf("item %d value %d", i, r.Value)
		}
	}
	if runs.Load() != 200 || peak.Load() > 8 || peak.Load() < 2 {
		t.Fatalf("runs %d, peak concurrency %d; want 200 and 2..8", runs.Load(), peak.Load())
	}
	for i := 0; i < 200; i += 37 {
		rec, _ := s.Peek(ctx, items[i].Key)
		if rec.State != "completed" {
			t.Fatalf("item %d record %+v", i, rec)
		}
	}
}

func testBatchCancelled(t *testing.T, f Factory) {
	s := must(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var items []consumer.BatchItem
	for i := 0; i < 10; i++ {
		items = append(items, consumer.BatchItem{Key: key("cancel", fmt.Sprint(i))})
	}
	var runs atomic.Int32
	res := consumer.ExecuteBatch(ctx, s, items, func(ctx context.Context, i int, it consumer.BatchItem) (int, error) {
		runs.Add(1)
		if i == 3 {
			cancel() // shutdown while item 3 runs
		}
		return i, nil
	})
	if runs.Load() != 4 {
		t.Fatalf("%d handlers ran, want 4", runs.Load())
	}
	for i, r := range res {
		if i <= 3 {
			expect(t, r, consumer.Success, nil)
			continue
		}
		expect(t, r, consumer.Error, context.Canceled)
		if !errors.Is(r.Err, consumer.ErrNotRun) || !r.Retryable() {
			t.Fatalf("item %d: a shutdown must be retryable", i)
		}
	}
	// The unstarted items were released: the next delivery claims them at once,
	// without counting the abandoned attempt.
	again := consumer.ExecuteBatch(context.Background(), s, items, func(ctx context.Context, i int, it consumer.BatchItem) (int, error) {
		runs.Add(1)
		return i, nil
	})
	for i, r := range again {
		want := consumer.Duplicate
		if i > 3 {
			want = consumer.Success
			if r.Attempt != 1 || r.Fence != 2 {
				t.Fatalf("item %d after release: attempt %d fence %d, want 1 and 2", i, r.Attempt, r.Fence)
			}
		}
		expect(t, r, want, nil)
	}
	if runs.Load() != 10 {
		t.Fatalf("%d handler runs in all, want 10", runs.Load())
	}
}

func testBatchStopAfterFailure(t *testing.T, f Factory) {
	s := must(t, f)
	ctx := context.Background()
	var items []consumer.BatchItem
	for i := 0; i < 6; i++ {
		items = append(items, consumer.BatchItem{Key: key("stop", fmt.Sprint(i))})
	}
	boom := errors.New("row 2 failed")
	var ran []int
	fn := func(ctx context.Context, i int, it consumer.BatchItem) (int, error) {
		ran = append(ran, i)
		if it.Key == items[2].Key {
			return 0, boom
		}
		return i, nil
	}
	res := consumer.ExecuteBatch(ctx, s, items, fn, consumer.WithStopAfterFailure(true))
	if fmt.Sprint(ran) != "[0 1 2]" {
		t.Fatalf("ran %v, want [0 1 2]", ran)
	}
	expect(t, res[0], consumer.Success, nil)
	expect(t, res[1], consumer.Success, nil)
	expect(t, res[2], consumer.Error, boom)
	for _, r := range res[3:] {
		expect(t, r, consumer.Error, consumer.ErrNotRun)
		if !r.Retryable() {
			t.Fatal("a not-run item must be retryable")
		}
	}
	// A claim that is not settled (here: a duplicate of a key that failed for
	// good) stops the batch as a handler error does.
	perm := key("stop", "permanent")
	expect(t, consumer.ExecuteIdempotently(ctx, s, perm, nil, func(ctx context.Context) (int, error) {
		return 0, consumer.Permanent(errors.New("bad"))
	}), consumer.Error, consumer.ErrPermanent)
	ran = nil
	blocked := []consumer.BatchItem{{Key: key("stop", "before")}, {Key: perm}, {Key: key("stop", "after")}}
	res = consumer.ExecuteBatch(ctx, s, blocked, fn, consumer.WithStopAfterFailure(true))
	if fmt.Sprint(ran) != "[0]" {
		t.Fatalf("ran %v, want only the item before the failed key", ran)
	}
	expect(t, res[0], consumer.Success, nil)
	expect(t, res[1], consumer.Duplicate, consumer.ErrPermanent)
	expect(t, res[2], consumer.Error, consumer.ErrNotRun)

	// The released items are claimed afresh, their attempt not counted.
	ran = nil
	res = consumer.ExecuteBatch(ctx, s, items[3:], fn, consumer.WithStopAfterFailure(true))
	for _, r := range res {
		expect(t, r, consumer.Success, nil)
		if r.Attempt != 1 {
			t.Fatalf("attempt %d after release, want 1", r.Attempt)
		}
	}
}
