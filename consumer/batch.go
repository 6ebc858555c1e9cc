package consumer

import (
	"context"
	"errors"
	"fmt"
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
	underLock   bool // the caller holds the key's lock: claims are Locked
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
		return failAll[T](items, configError("nil store: pass a store from store/redis, store/postgres, store/dynamodb or store/memory"))
	case fn == nil:
		return failAll[T](items, ErrNilHandler)
	}
	s := store.Settings()
	if s.Codec == nil || s.Logger == nil { // a nil store pointer, or a Store that skipped its constructor
		return failAll[T](items, configError("the store has no settings: make it with its package's NewStore and check the error"))
	}
	if s.Locker != nil && !bc.locked {
		return executeLocked(ctx, store, s, items, fn, bc)
	}
	began := time.Now()
	sc := getScratch()
	defer sc.put()
	out := make([]Result[T], len(items))
	fps := sized(sc.fps, len(items))
	leader := sized(sc.leader, len(items)) // first item with the same key; -1 when invalid
	pending := sc.pending[:0]
	sc.fps, sc.leader = fps, leader
	var seen map[Key]int
	if len(items) > 1 {
		if sc.seen == nil {
			sc.seen = make(map[Key]int, len(items))
		}
		seen = sc.seen
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
			fps[i] = FingerprintOf(it.Payload)
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
	sc.pending = pending

	deadline := time.Now().Add(s.WaitInProgress)
	for len(pending) > 0 {
		waiting := runPass(ctx, store, s, sc, items, fps, pending, fn, bc, out, &stopAt)
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
	if s.watchOutcomes() {
		took := time.Since(began)
		for i := range out {
			reportOutcome(ctx, s, "execute", &out[i], took)
		}
	}
	return out
}

// runPass claims pending items, runs the claimed ones and records every result.
// It returns the items found in progress.
func runPass[T any](ctx context.Context, store Store, s Settings, sc *scratch, items []BatchItem, fps []Fingerprint,
	pending []int, fn BatchHandler[T], bc batchConfig, out []Result[T], stopAt *int) (waiting []int) {
	claims := sized(sc.claims, len(pending))
	sc.claims = claims
	owners := newOwners(len(pending))
	for j, i := range pending {
		claims[j] = Claim{Key: items[i].Key, Owner: owners[j], Fingerprint: fps[i], Locked: bc.underLock}
	}
	sent := time.Now()
	reps, resent := claimAll(ctx, store, s, claims)
	if s.watchClaims() {
		reportClaim(s, reps, time.Since(sent))
	}
	var run, unguarded []int // indexes into pending
	for j, rep := range reps {
		i := pending[j]
		if s.Completions != nil {
			rep = completedElsewhere(ctx, s, items[i].Key, rep)
			reps[j] = rep
		}
		switch {
		case rep.Err != nil && s.FailOpen && errors.Is(rep.Err, ErrStoreUnavailable) && !lookupFailed(rep.Err):
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
	if len(run) > 0 {
		a := newAttempts(store, s, sc, bc, fn, items, out, *stopAt, len(run))
		for _, j := range run {
			a.add(ctx, pending[j], claims[j], reps[j], sent, needsMark(reps[j], resent, j))
		}
		a.run(ctx)
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
