package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit/internal/retry"
)

// BatchItem is one message of a batch: its key and its payload (fingerprinted).
type BatchItem struct {
	Key     Key
	Payload []byte
}

// BatchHandler handles item i of a batch.
type BatchHandler[T any] func(ctx context.Context, i int, item BatchItem) (T, error)

// BatchOption configures one ExecuteBatch call.
type BatchOption interface{ applyBatch(*batchConfig) }

type batchConfig struct {
	concurrency int
	perMessage  bool
	stopOnFail  bool
	locked      bool // the caller handles the lock (executeLocked)
	force       bool // claims take live leases over: the caller holds the key's lock
	probe       bool // claim only to read: release any claim at once, report IN_PROGRESS
}

type batchOptFunc func(*batchConfig)

func (f batchOptFunc) applyBatch(c *batchConfig) { f(c) }

// WithConcurrency runs up to n handlers of a batch at once (started in input order).
// Default 1: handlers run one after another in input order.
func WithConcurrency(n int) BatchOption {
	return batchOptFunc(func(c *batchConfig) { c.concurrency = n })
}

// WithPerMessageCompletion completes each message right after its handler (one
// round trip each) instead of completing the whole batch in one round trip at the
// end. It narrows the crash window: see ExecuteBatch. Default off.
func WithPerMessageCompletion(on bool) BatchOption {
	return batchOptFunc(func(c *batchConfig) { c.perMessage = on })
}

// WithStopAfterFailure stops the batch at the first item whose result is not
// settled (its Action is not Settle: a handler error, an invalid key, a conflict,
// an in-progress key, a duplicate of a failed key...): the items after it are not
// run, their claims are released (the attempt is not counted) and each gets an
// Error matching ErrNotRun. Adapters that keep a
// partition strictly in order use it to retry the failed item before any later
// one runs. With WithConcurrency above 1, items already started still finish.
// Default off: every item runs.
func WithStopAfterFailure(on bool) BatchOption {
	return batchOptFunc(func(c *batchConfig) { c.stopOnFail = on })
}

// ExecuteBatch runs fn for every item of a batch with the guarantees of
// ExecuteIdempotently, claiming every key in one round trip and completing them in
// one more (on Redis Cluster, one script call per hash slot, all in one pipeline).
// Results are in input order. An item whose key repeats an earlier item's in the
// same batch is not run: it gets the earlier item's outcome (its Success becomes a
// Duplicate), or ErrPayloadConflict when its payload differs.
//
// Crash window: by default completions are written after the last handler of the
// batch returns, so a crash after some handlers ran and before that write re-runs
// them when the batch is redelivered (once their leases expire). Handlers whose
// side effects check the fence (FenceFromContext) are safe regardless; otherwise
// use WithPerMessageCompletion to write each completion as soon as its handler
// returns, at one round trip per message.
func ExecuteBatch[T any](ctx context.Context, store Store, items []BatchItem, fn BatchHandler[T],
	opts ...BatchOption) []Result[T] {
	bc := batchConfig{concurrency: 1}
	for _, o := range opts {
		if o == nil {
			return failAll[T](items, configError("nil batch option"))
		}
		o.applyBatch(&bc)
	}
	if bc.concurrency < 1 {
		return failAll[T](items, configError("concurrency %d: WithConcurrency takes at least 1", bc.concurrency))
	}
	return execute(ctx, store, items, fn, bc)
}

func failAll[T any](items []BatchItem, err error) []Result[T] {
	out := make([]Result[T], len(items))
	for i, it := range items {
		out[i] = Result[T]{Outcome: Error, Key: it.Key, Err: err}
	}
	return out
}

// execute is the one path behind ExecuteIdempotently and ExecuteBatch.
func execute[T any](ctx context.Context, store Store, items []BatchItem, fn BatchHandler[T], bc batchConfig) []Result[T] {
	switch {
	case store == nil:
		return failAll[T](items, configError("nil store: pass a store from NewRedisStore or NewMemoryStore"))
	case fn == nil:
		return failAll[T](items, ErrNilHandler)
	}
	s := store.Settings()
	if s.Locker != nil && !bc.locked {
		return executeLocked(ctx, store, s, items, fn, bc)
	}
	out := make([]Result[T], len(items))
	fps := make([]string, len(items))
	leader := make([]int, len(items)) // first item with the same key; -1 when invalid
	pending := make([]int, 0, len(items))
	var seen map[Key]int
	if len(items) > 1 {
		seen = make(map[Key]int, len(items))
	}
	stopAt := len(items) // with stopOnFail: no item after this index runs
	for i, it := range items {
		out[i].Key = it.Key
		if err := it.Key.Validate(); err != nil {
			out[i].Outcome, out[i].Err, leader[i] = Error, err, -1
			if bc.stopOnFail {
				stopAt = min(stopAt, i)
			}
			continue
		}
		if s.Fingerprint {
			fps[i] = fingerprint(it.Payload)
		}
		if first, ok := seen[it.Key]; ok {
			leader[i] = first
			continue
		}
		if seen != nil {
			seen[it.Key] = i
		}
		leader[i] = i
		pending = append(pending, i)
	}

	deadline := time.Now().Add(s.WaitInProgress)
	for len(pending) > 0 {
		waiting := runPass(ctx, store, s, items, fps, pending, fn, bc, out, &stopAt)
		if len(waiting) == 0 || s.WaitInProgress == 0 || ctx.Err() != nil {
			break
		}
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		pause := min(left, 250*time.Millisecond)
		for _, i := range waiting {
			pause = min(pause, out[i].LeaseLeft+5*time.Millisecond)
		}
		if !retry.Sleep(ctx, max(pause, 5*time.Millisecond)) {
			break
		}
		pending = waiting
	}

	for i, l := range leader {
		if l < 0 || l == i {
			continue
		}
		r := out[l]
		r.Key = items[i].Key
		if s.Fingerprint && fps[i] != fps[l] {
			r = Result[T]{Outcome: Error, Key: items[i].Key,
				Err: fmt.Errorf("%w: key %q appears twice in the batch with different payloads", ErrPayloadConflict, string(items[i].Key))}
		} else if r.Outcome == Success {
			r.Outcome = Duplicate
		}
		out[i] = r
	}
	return out
}

// runPass claims pending items, runs the claimed ones and records every result.
// It returns the items found in progress.
func runPass[T any](ctx context.Context, store Store, s Settings, items []BatchItem, fps []string,
	pending []int, fn BatchHandler[T], bc batchConfig, out []Result[T], stopAt *int) (waiting []int) {
	claims := make([]Claim, len(pending))
	for j, i := range pending {
		claims[j] = Claim{Key: items[i].Key, Owner: newOwner(), Fingerprint: fps[i], Force: bc.force}
	}
	granted := time.Now()
	reps := store.Begin(ctx, claims)
	var run, unguarded []int // indexes into pending
	for j, rep := range reps {
		i := pending[j]
		switch {
		case rep.Err != nil && s.FailOpen && errors.Is(rep.Err, ErrStoreUnavailable):
			unguarded = append(unguarded, j)
		case rep.Err != nil:
			out[i] = Result[T]{Outcome: Error, Key: items[i].Key, Err: rep.Err}
		case rep.Claimed():
			run = append(run, j)
		default:
			out[i] = resolve[T](s, items[i].Key, rep)
			if out[i].Outcome == InProgress {
				waiting = append(waiting, i)
			}
		}
		if bc.stopOnFail && out[i].Outcome != 0 && out[i].Action() != Settle {
			*stopAt = min(*stopAt, i)
		}
	}
	if len(run) > 0 && bc.probe { // the lock is held elsewhere: this claim must not run
		release := make([]Owned, len(run))
		for k, j := range run {
			release[k] = Owned{Key: claims[j].Key, Owner: claims[j].Owner}
			out[pending[j]] = Result[T]{Outcome: InProgress, Key: items[pending[j]].Key, Attempt: reps[j].Attempts, Fence: reps[j].Fence}
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(max(s.Lease, time.Second), 5*time.Second))
		store.Release(rctx, release)
		cancel()
		run = nil
	}
	if len(run) > 0 {
		runClaimed(ctx, store, s, items, pending, claims, reps, run, granted, fn, bc, out, *stopAt)
	}
	for _, j := range unguarded {
		i := pending[j]
		s.Logger.Warn("consumer: store unavailable: running handler unguarded (fail-open)",
			"key", string(items[i].Key), "scope", s.Scope, "err", reps[j].Err)
		hctx := withInfo(ctx, Info{Key: items[i].Key, Scope: s.Scope, Unguarded: true})
		v, err := callHandler(hctx, fn, i, items[i])
		out[i] = Result[T]{Outcome: Success, Value: v, Key: items[i].Key, Unguarded: true}
		if err != nil {
			out[i] = Result[T]{Outcome: Error, Err: err, Key: items[i].Key, Unguarded: true}
		}
	}
	return waiting
}

// runClaimed runs the handlers of claimed items under one heartbeat and settles them.
func runClaimed[T any](ctx context.Context, store Store, s Settings, items []BatchItem, pending []int,
	claims []Claim, reps []ClaimReply, run []int, granted time.Time, fn BatchHandler[T], bc batchConfig, out []Result[T], stopAt int) {
	beats := make([]*beat, len(run))
	hctxs := make([]context.Context, len(run))
	for k, j := range run {
		i := pending[j]
		hctx, cancel := context.WithCancelCause(ctx)
		hctxs[k] = withInfo(hctx, Info{Key: items[i].Key, Scope: s.Scope, Attempt: reps[j].Attempts, Fence: reps[j].Fence})
		beats[k] = &beat{owned: Owned{Key: items[i].Key, Owner: claims[j].Owner, Fence: reps[j].Fence},
			cancel: cancel, lastOK: granted}
	}
	hb := startHeartbeat(ctx, store, s.Lease, beats)
	timeout := min(max(s.Lease, time.Second), 5*time.Second)

	sts := make([]Settlement, len(run))
	values := make([]T, len(run))
	herrs := make([]error, len(run))
	started := make([]bool, len(run))
	var failed atomic.Bool
	one := func(k int) {
		j := run[k]
		i := pending[j]
		r := &out[i]
		*r = Result[T]{Key: items[i].Key, Attempt: reps[j].Attempts, Fence: reps[j].Fence}
		if ctx.Err() != nil || (bc.stopOnFail && (failed.Load() || i > stopAt)) {
			return // never started: released below
		}
		started[k] = true
		values[k], herrs[k] = callHandler(hctxs[k], fn, i, items[i])
		if herrs[k] != nil {
			failed.Store(true)
		}
		sts[k], r.ResultDropped = settlement(s, items[i].Key, claims[j].Owner, values[k], herrs[k])
		if !bc.perMessage || errors.Is(herrs[k], ErrAbandoned) {
			return
		}
		if lost := hb.lostErr(beats[k]); lost != nil {
			hb.finish(beats[k])
			r.Outcome, r.Err = Error, lost
			return
		}
		rep := settle(ctx, store, sts[k:k+1], timeout)[0]
		hb.finish(beats[k])
		finishResult(r, values[k], herrs[k], rep)
	}
	if bc.concurrency <= 1 {
		for k := range run {
			one(k)
		}
	} else {
		var wg sync.WaitGroup
		sem := make(chan struct{}, bc.concurrency)
		for k := range run {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				one(k)
			}()
		}
		wg.Wait()
	}
	hb.stop()

	var batch []Settlement
	var batchIdx []int
	var release []Owned
	for k, b := range beats {
		i := pending[run[k]]
		switch {
		case !started[k]:
			release = append(release, b.owned)
			out[i].Outcome = Error
			if err := context.Cause(ctx); err != nil {
				out[i].Err = fmt.Errorf("%w: %w", ErrNotRun, err)
			} else {
				out[i].Err = fmt.Errorf("%w: an earlier item of the batch was not settled", ErrNotRun)
			}
		case errors.Is(herrs[k], ErrAbandoned):
			release = append(release, b.owned)
			out[i].Outcome, out[i].Err = Error, herrs[k]
		case bc.perMessage:
		case b.lost != nil:
			out[i].Outcome, out[i].Err = Error, b.lost
			s.Logger.Warn("consumer: lease lost while the handler ran: result not stored",
				"key", string(b.owned.Key), "fence", b.owned.Fence, "reason", b.lost.Reason)
		default:
			batch, batchIdx = append(batch, sts[k]), append(batchIdx, k)
		}
	}
	if len(batch) > 0 {
		for n, rep := range settle(ctx, store, batch, timeout) {
			k := batchIdx[n]
			finishResult(&out[pending[run[k]]], values[k], herrs[k], rep)
		}
	}
	if len(release) > 0 {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		store.Release(rctx, release) // a failed release only delays the next claim until the lease expires
		cancel()
	}
	for _, b := range beats {
		b.cancel(context.Canceled)
	}
}
