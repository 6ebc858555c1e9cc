package consumer

import (
	"context"
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

// WithConcurrency bounds how many handlers run at once, in ExecuteBatch (started
// in input order; default 1: one after another in input order) and in a Pipeline
// (default 256, chosen for handlers that wait on I/O: a database write, an HTTP
// call). The adapters' option of the same name sets the Pipeline's.
func WithConcurrency(n int) interface {
	BatchOption
	PipelineOption
} {
	return concurrency(n)
}

// concurrency is WithConcurrency's option, for both engines.
type concurrency int

func (n concurrency) applyBatch(c *batchConfig)       { c.concurrency = int(n) }
func (n concurrency) applyPipeline(c *pipelineConfig) { c.concurrency = int(n) }

// WithPerMessageCompletion completes each message right after its handler (one
// round trip each) instead of completing the whole batch in one round trip at the
// end. It narrows the crash window: see ExecuteBatch. Default off.
func WithPerMessageCompletion(on bool) BatchOption {
	return batchOptFunc(func(c *batchConfig) { c.perMessage = on })
}

// WithStopAfterFailure stops the batch at the first item whose result is not
// settled (its Action is not Ack: a handler error, an invalid key, a conflict,
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
	b := &batch[T]{store: store, s: s, items: items, fn: fn, bc: bc, out: make([]Result[T], len(items))}
	if s.Locker != nil && !bc.locked {
		b.runLocked(ctx)
		return b.out
	}
	b.sc = getScratch()
	defer b.sc.put()
	b.run(ctx)
	return b.out
}

// batch is one ExecuteBatch call (or ExecuteIdempotently's batch of one): its
// input, options and results, and what its passes share.
type batch[T any] struct {
	store Store
	s     Settings
	sc    *scratch
	items []BatchItem
	fps   []Fingerprint // by item, with WithFingerprint
	fn    BatchHandler[T]
	bc    batchConfig
	out   []Result[T]
	// stopAt: with WithStopAfterFailure, no item after this index starts.
	stopAt int
}

// run runs the items in passes (a pass claims what is pending; items found in
// progress are pending again, within WithWaitInProgress), answers repeated keys
// from their first item, and reports every outcome.
func (b *batch[T]) run(ctx context.Context) {
	began := time.Now()
	leader, pending := b.prepare()
	deadline := time.Now().Add(b.s.WaitInProgress)
	for len(pending) > 0 {
		waiting := b.pass(ctx, pending)
		if len(waiting) == 0 || b.s.WaitInProgress == 0 || ctx.Err() != nil {
			break
		}
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		pause := min(left, 250*time.Millisecond)
		for _, i := range waiting {
			pause = min(pause, b.out[i].LeaseLeft+5*time.Millisecond)
		}
		if !retry.Sleep(ctx, max(pause, 5*time.Millisecond)) {
			break
		}
		pending = waiting
	}
	b.answerRepeats(leader)
	if b.s.watchOutcomes() {
		took := time.Since(began)
		for i := range b.out {
			reportOutcome(ctx, b.s, "execute", &b.out[i], took)
		}
	}
}

// prepare validates and fingerprints the items. It returns, by item, the first
// item with the same key (-1 for an invalid key), and the items to claim: the
// first of each valid key.
func (b *batch[T]) prepare() (leader, pending []int) {
	sc := b.sc
	b.fps = sized(sc.fps, len(b.items))
	leader = sized(sc.leader, len(b.items))
	pending = sc.pending[:0]
	sc.fps, sc.leader = b.fps, leader
	repeats := len(b.items) > 1 // a key may repeat
	if repeats {
		sc.seen.reset(len(b.items))
	}
	b.stopAt = len(b.items)
	for i, it := range b.items {
		b.out[i].Key = it.Key
		if err := it.Key.Validate(); err != nil {
			b.out[i].Outcome, b.out[i].Err, leader[i] = Error, err, -1
			if b.bc.stopOnFail {
				b.stopAt = min(b.stopAt, i)
			}
			continue
		}
		if b.s.Fingerprint {
			b.fps[i] = FingerprintOf(it.Payload)
		}
		if repeats {
			if first := sc.seen.first(b.items, i); first != i {
				leader[i] = first
				continue
			}
		}
		leader[i] = i
		pending = append(pending, i)
	}
	sc.pending = pending
	return leader, pending
}

// answerRepeats gives every item whose key repeats an earlier item's (leader)
// that item's outcome: a Success becomes a Duplicate, a different payload a
// conflict.
func (b *batch[T]) answerRepeats(leader []int) {
	for i, l := range leader {
		if l < 0 || l == i {
			continue
		}
		r := b.out[l]
		r.Key = b.items[i].Key
		if b.s.Fingerprint && b.fps[i] != b.fps[l] {
			r = Result[T]{Outcome: Error, Key: b.items[i].Key,
				Err: fmt.Errorf("%w: key %q appears twice in the batch with different payloads", ErrPayloadConflict, string(b.items[i].Key))}
		} else if r.Outcome == Success {
			r.Outcome = Duplicate
		}
		b.out[i] = r
	}
}

// call is how the batch calls item i's handler.
func (b *batch[T]) call(i int) handlerCall[T] {
	return handlerCall[T]{fn: b.fn, i: i, item: b.items[i]}
}
