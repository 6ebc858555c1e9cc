package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Pipeline runs a continuous stream of messages through their handlers with the
// guarantees of ExecuteIdempotently, for consumers that never stop: broker
// adapters, replay tools. Messages are submitted one by one; the pipeline claims
// what is waiting in one call (up to WithMaxBatch), starts each handler as soon
// as its claim returns, and settles finished handlers the same way, with up to
// WithCallsInFlight claim calls and as many settle calls under way at once, so
// that the store, the handlers and the caller work at the same time.
//
// Claims follow the handlers: the messages claimed and not yet done running
// (claim calls under way included) never outnumber WithConcurrency's handlers
// plus one call's read-ahead (WithMaxBatch), so a claim is made for a message a
// handler starts soon, not for the whole window; a claim is not an attempt.
//
// Calls gather what is ready: a claim call goes when a full call's worth
// (WithMaxBatch) may be claimed, and a settle call when that many handlers have
// finished, or at once when nothing else could join the call soon (no handler
// running or waiting to run, nothing being claimed), or once the first message
// waiting for the call has waited the gather delay: 1 ms, or a hundredth of the
// store's lease when that is shorter. The delay never puts a claim at risk: the
// lease keeper renews every claim until it is settled, and a lease has more than
// half its length left between renewals. When idle the pipeline waits for
// nothing: a lone message is claimed, and settled, at once.
//
// Each message's outcome reaches its Done function once it is settled: completed
// or failed in the store, released, or answered without a claim (a duplicate, a
// conflict, another owner's live claim, an error). Two messages with the same key
// never run at once: the second waits for the first to settle, and then usually
// finds it DUPLICATE.
//
// A Pipeline is safe for concurrent use. Shutdown stops it.
type Pipeline[T any] struct {
	engine // its attempts' store, settings, lease keeper, source and stop
	cfg    pipelineConfig
	// The gather delays of claim and settle calls, in nanoseconds (see Pipeline);
	// both min(1ms, lease/100).
	claimGather, settleGather int64

	slots chan struct{} // one per message accepted and not yet settled

	mu          sync.Mutex
	runq        []*pitem[T] // runq[runHead:]: claimed, waiting for a handler worker
	runHead     int
	workers     int             // handler workers started (at most cfg.concurrency)
	idle        int             // workers waiting for runq
	signalled   int             // idle workers signalled that have not yet woken
	starting    int             // workers started that have not yet looked at runq
	handlerNs   int64           // a moving average of how long handlers take (ns)
	runClosed   bool            // every message is answered: workers end
	workCond    sync.Cond       // on mu: a worker waits here for runq
	ready       []*pitem[T]     // accepted, waiting to be claimed
	claimSince  int64           // since when a claim call could take a message (mono); 0: none could
	claiming    int             // messages in claim calls under way
	active      int             // claimed messages whose handlers have not returned
	claimCalls  int             // claim calls under way
	settling    []*pitem[T]     // handled, waiting to be settled
	settleSince int64           // when the messages in settling began to wait for a settle call (mono)
	settleCalls int             // settle or release calls under way
	callIdle    int             // call workers done with their call and not handed another (see spawn)
	callq       chan callJob[T] // the jobs spawn hands idle call workers
	timer       *time.Timer     // wakes the loop when a gathering call is due
	timerAt     int64           // when timer fires (mono); 0: not armed
	slab        []pitem[T]      // messages are allocated from here, a slab at a time
	free        []*pitem[T]     // settled messages, zeroed for reuse (see recycle)
	ctxs        []itemCtx       // handler contexts are allocated from here, a slab at a time
	bufs        sync.Pool       // *callBuf[T]: the working slices of claim and settle calls
	inflight    map[Key]*pitem[T]
	stopped     bool          // Shutdown began: no more messages
	abandoned   atomic.Bool   // Shutdown's wait ran out: nothing more starts, running handlers are cancelled; set under mu
	wake        chan struct{} // a claim or a settlement may be due
	quit        chan struct{}
	stopOnce    sync.Once
	done        chan struct{} // closed once every message is answered and every goroutine has ended
	loops       sync.WaitGroup
	items       sync.WaitGroup // messages accepted and not yet settled
}

// PipelineItem is one message for a Pipeline.
type PipelineItem[T any] struct {
	Key     Key
	Payload []byte // fingerprinted, as by ExecuteIdempotently
	// Run is the message's handler. Its context is the one given to Submit, cancelled
	// with a *LeaseLostError cause if the claim is lost, and carries Info.
	Run func(ctx context.Context) (T, error)
	// Done receives the message's result once it is settled. It is called once,
	// from the pipeline's goroutines (from Submit itself for a message with an
	// invalid key), and should return quickly. A panic in Done is
	// recovered and logged at Error with the result it was given.
	Done func(Result[T])
	// DoneContext is Done given the context that was given to Submit as well, as
	// it was given (it may have ended since): one function value can then serve
	// every message, finding its message in that context (a context of the
	// caller's own type, or a value it carries), where Done needs a closure, an
	// allocation, per message. It is called as Done is, with the same panic policy.
	// Set Done or DoneContext, not both.
	DoneContext func(ctx context.Context, r Result[T])
}

// pitem is a message inside the pipeline: once claimed, an attempt. Its handler's
// context (attempt.hctx, which attempt.lease cancels) is made when it is
// submitted, as a child of Submit's context. Once settled and answered, a pitem
// is reused for a later message (see recycle); its handler's context is not,
// since a handler, or Done's caller, may keep it.
type pitem[T any] struct {
	PipelineItem[T]
	attempt[T]
	fp        Fingerprint
	result    Result[T]
	sent      time.Time   // when its claim call was sent
	unguarded error       // the store's error, when WithFailOpen runs it without a claim
	next      []*pitem[T] // messages of the same key waiting for this one
}

// pitemSlab is how many messages, or handler contexts, are allocated at once. A
// slab of contexts lives as long as any of them is referenced (a handler may keep
// its context).
const pitemSlab = 64

// PipelineOption configures a Pipeline. Every option states its default.
type PipelineOption interface{ applyPipeline(*pipelineConfig) }

type pipelineConfig struct {
	window      int
	concurrency int
	maxBatch    int
	calls       int
	source      string
}

type pipelineOptFunc func(*pipelineConfig)

func (f pipelineOptFunc) applyPipeline(c *pipelineConfig) { f(c) }

// WithInFlight bounds how many messages a Pipeline holds between Submit and Done
// (its window); Submit waits while it is full. Default 512. The Kafka adapter's
// option of the same name sets it.
func WithInFlight(n int) PipelineOption {
	return pipelineOptFunc(func(c *pipelineConfig) { c.window = n })
}

// WithMaxBatch bounds how many messages one claim or settle call carries, and how
// many messages may be claimed ahead of free handlers (see Pipeline). Default 100.
func WithMaxBatch(n int) PipelineOption {
	return pipelineOptFunc(func(c *pipelineConfig) { c.maxBatch = n })
}

// WithCallsInFlight sets how many claim calls, and how many settle calls, may be
// under way at once: two lets the store work on one batch while the next gathers.
// Default 2.
func WithCallsInFlight(n int) PipelineOption {
	return pipelineOptFunc(func(c *pipelineConfig) { c.calls = n })
}

// WithSource names what feeds the pipeline in the events its observers see
// (OutcomeEvent.Source): "kafka", "amqp", "replay"... Default "pipeline".
func WithSource(name string) PipelineOption {
	return pipelineOptFunc(func(c *pipelineConfig) { c.source = name })
}

// NewPipeline starts a pipeline on store. It fails with ErrInvalidConfig on a bad
// option or store; a store with WithLock is refused (long jobs under a lock run
// through ExecuteIdempotently).
func NewPipeline[T any](ctx context.Context, store Store, opts ...PipelineOption) (*Pipeline[T], error) {
	cfg := pipelineConfig{window: 512, concurrency: 256, maxBatch: 100, calls: 2, source: "pipeline"}
	for _, o := range opts {
		if o == nil {
			return nil, configError("nil pipeline option")
		}
		o.applyPipeline(&cfg)
	}
	switch {
	case store == nil:
		return nil, configError("nil store: pass a store from store/redis, store/postgres, store/dynamodb or store/memory")
	case cfg.window < 1, cfg.concurrency < 1, cfg.maxBatch < 1, cfg.calls < 1:
		return nil, configError("pipeline window %d, handlers %d, max batch %d, calls in flight %d: each takes at least 1",
			cfg.window, cfg.concurrency, cfg.maxBatch, cfg.calls)
	}
	s := store.Settings()
	switch {
	case s.Codec == nil || s.Logger == nil:
		return nil, configError("the store has no settings: make it with its constructor and check the error")
	case s.Locker != nil:
		return nil, configError("a store with WithLock runs handlers one by one under their locks: use ExecuteIdempotently")
	}
	p := &Pipeline[T]{
		engine:      engine{store: store, s: s, keep: newKeeper(ctx, store, s), source: cfg.source},
		cfg:         cfg,
		claimGather: int64(min(time.Millisecond, s.Lease/100)),
		slots:       make(chan struct{}, cfg.window),
		callq:       make(chan callJob[T], 2*cfg.calls),
		inflight:    make(map[Key]*pitem[T]),
		wake:        make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}),
	}
	p.settleGather = p.claimGather
	p.bufs.New = func() any { return new(callBuf[T]) }
	p.workCond.L = &p.mu
	p.stopCause = p.abandonCause
	p.timer = time.AfterFunc(time.Hour, p.fired)
	p.timer.Stop()
	p.loops.Add(1)
	go p.loop(context.WithoutCancel(ctx))
	return p, nil
}

// ErrPipelineStopped: Submit after Shutdown.
var ErrPipelineStopped = errors.New("consumer: pipeline stopped")

// Submit hands one message to the pipeline, waiting while the window is full. It
// returns ctx's error if ctx ends first, or ErrPipelineStopped after Shutdown; the
// message was then not taken and its Done is not called. A message with an invalid
// key is taken and answered at once.
func (p *Pipeline[T]) Submit(ctx context.Context, it PipelineItem[T]) error {
	switch {
	case it.Run == nil:
		return configError("pipeline item without Run")
	case it.Done == nil && it.DoneContext == nil:
		return configError("pipeline item without Done or DoneContext: set one")
	case it.Done != nil && it.DoneContext != nil:
		return configError("pipeline item with both Done and DoneContext: set one")
	}
	select {
	case p.slots <- struct{}{}: // a free slot: no need to watch ctx and quit
	default:
		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		case <-p.quit:
			return ErrPipelineStopped
		}
	}
	if err := it.Key.Validate(); err != nil {
		<-p.slots
		p.deliver(ctx, &it, Result[T]{Outcome: Error, Key: it.Key, Err: err})
		return nil
	}
	var fp Fingerprint
	if p.s.Fingerprint {
		fp = FingerprintOf(it.Payload)
	}
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		<-p.slots
		return ErrPipelineStopped
	}
	pi := p.newItem()
	pi.PipelineItem, pi.fp = it, fp
	pi.hctx = p.newCtx()
	pi.hctx.init(ctx)
	pi.lease.ctx, pi.res = pi.hctx, &pi.result
	p.items.Add(1)
	if first := p.inflight[it.Key]; first != nil {
		first.next = append(first.next, pi) // runs once the first settles
	} else {
		p.inflight[it.Key] = pi
		p.readyLocked(pi, false)
	}
	p.mu.Unlock()
	return nil
}

// newItem returns a zero message: a recycled one, or one from the slab. p.mu is
// held.
func (p *Pipeline[T]) newItem() *pitem[T] {
	if n := len(p.free); n > 0 {
		pi := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		return pi
	}
	if len(p.slab) == 0 {
		p.slab = make([]pitem[T], pitemSlab)
	}
	pi := &p.slab[0]
	p.slab = p.slab[1:]
	return pi
}

// newCtx returns a zero handler context from its slab. p.mu is held.
func (p *Pipeline[T]) newCtx() *itemCtx {
	if len(p.ctxs) == 0 {
		p.ctxs = make([]itemCtx, pitemSlab)
	}
	c := &p.ctxs[0]
	p.ctxs = p.ctxs[1:]
	return c
}

// recycle zeroes its, messages answered and let go (nothing of the pipeline's
// refers to them any more), and keeps them for newItem. Only the lease keeper may
// still hold one: a renewal in flight that took its lease before it was settled.
// So they are zeroed under the keeper's lock, each lease's gen bumped, and the
// renewal leaves them alone (see keeper.tick).
func (p *Pipeline[T]) recycle(its ...*pitem[T]) {
	k := p.keep
	k.mu.Lock()
	for _, it := range its {
		gen := it.lease.gen
		*it = pitem[T]{}
		it.lease.gen = gen + 1
	}
	k.mu.Unlock()
	p.mu.Lock()
	p.free = append(p.free, its...)
	p.mu.Unlock()
}

// readyLocked queues it for a claim call, at the front when first, and wakes the
// loop if a claim call is due. p.mu is held.
func (p *Pipeline[T]) readyLocked(it *pitem[T], first bool) {
	if first {
		p.ready = append(p.ready, nil)
		copy(p.ready[1:], p.ready)
		p.ready[0] = it
	} else {
		p.ready = append(p.ready, it)
	}
	p.kickLocked()
}

// finish answers it, lets the next message of its key go, and frees its slot.
func (p *Pipeline[T]) finish(it *pitem[T], r Result[T]) {
	p.answer(it, r)
	p.mu.Lock()
	unrun := p.nextLocked(it)
	p.mu.Unlock()
	p.recycle(it)
	<-p.slots
	p.items.Done()
	if unrun != nil {
		p.finish(unrun, notRun[T](unrun.Key, ErrPipelineStopped))
	}
}

// finishAll is finish for each of its (a settle call's), with one lock.
func (p *Pipeline[T]) finishAll(its []*pitem[T]) {
	for _, it := range its {
		p.answer(it, it.result)
	}
	var unrun []*pitem[T]
	p.mu.Lock()
	for _, it := range its {
		if u := p.nextLocked(it); u != nil {
			unrun = append(unrun, u)
		}
	}
	p.mu.Unlock()
	p.recycle(its...)
	for range its {
		<-p.slots
		p.items.Done()
	}
	for _, u := range unrun {
		p.finish(u, notRun[T](u.Key, ErrPipelineStopped))
	}
}

// answer ends it's claim and context, reports its outcome and calls its Done.
func (p *Pipeline[T]) answer(it *pitem[T], r Result[T]) {
	if it.lease.claim != nil && !it.lease.done { // settling finished it, in this goroutine
		p.keep.finish(&it.lease)
	}
	it.lease.cancel(context.Canceled)
	if p.s.watchOutcomes() {
		var took time.Duration
		if !it.sent.IsZero() {
			took = time.Since(it.sent)
		}
		p.reportOutcome(it, &r, took)
	}
	p.deliver(it.hctx.parent, &it.PipelineItem, r)
}

// reportOutcome tells the observers of it's outcome r, containing a panic in an
// outcome hook (see the panic policy in attempt.go).
func (p *Pipeline[T]) reportOutcome(it *pitem[T], r *Result[T], took time.Duration) {
	defer func() {
		if v := recover(); v != nil {
			contained(p.s, "reporting an outcome", v, 1, resultAttrs(r)...)
		}
	}()
	reportOutcome(it.hctx.plain(), p.s, p.source, r, took)
}

// deliver calls it's Done with r, or its DoneContext with r and ctx, the context
// it was submitted with. A panic there is contained: it is logged with the result
// it was given, and the pipeline goes on.
func (p *Pipeline[T]) deliver(ctx context.Context, it *PipelineItem[T], r Result[T]) {
	defer func() {
		if v := recover(); v != nil {
			contained(p.s, "calling a message's Done", v, 1, resultAttrs(&r)...)
		}
	}()
	if it.DoneContext != nil {
		it.DoneContext(ctx, r)
		return
	}
	it.Done(r)
}

// resultAttrs are the log attributes of a result whose delivery panicked.
func resultAttrs[T any](r *Result[T]) []any {
	return []any{"key", string(r.Key), "outcome", r.Outcome.String(), "action", r.Action().String(), "err", r.Err}
}

// nextLocked lets the next message of it's key go, now that it is answered, and
// returns that message instead when the pipeline gave up on what has not started
// (it is to be answered as not run). p.mu is held.
func (p *Pipeline[T]) nextLocked(it *pitem[T]) (unrun *pitem[T]) {
	switch {
	case len(it.next) > 0 && p.abandoned.Load():
		unrun = it.next[0]
		unrun.next = it.next[1:]
		p.inflight[it.Key] = unrun
	case len(it.next) > 0:
		n := it.next[0]
		n.next = it.next[1:]
		p.inflight[it.Key] = n
		p.readyLocked(n, true)
	default:
		delete(p.inflight, it.Key)
	}
	return unrun
}

// notRun is the result of a message that was never claimed and never will be.
func notRun[T any](key Key, why error) Result[T] {
	return Result[T]{Outcome: Error, Key: key, Err: notRunError(why)}
}

// abandonCause is the pipeline's stop, as its engine's: ErrPipelineStopped once
// Shutdown gave up waiting, nil before.
func (p *Pipeline[T]) abandonCause() error {
	if p.abandoned.Load() {
		return ErrPipelineStopped
	}
	return nil
}

// Shutdown stops taking messages and waits, until ctx ends, for those it holds to
// settle; then the handlers still running see their contexts cancelled and their
// claims are released once they return (the attempt not counted). It returns when
// every message has been answered and the pipeline's goroutines have ended, or
// ctx's error if the handlers have not returned a call timeout after ctx ended:
// the pipeline then goes on stopping in the background, and every goroutine ends
// once the last handler returns. Shutdown may be called more than once, also
// concurrently; each call waits as the first does.
func (p *Pipeline[T]) Shutdown(ctx context.Context) error {
	p.stopOnce.Do(func() {
		p.mu.Lock()
		p.stopped = true
		p.mu.Unlock()
		go p.stop()
	})
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
	}
	p.abandon()
	select {
	case <-p.done:
		return nil
	case <-time.After(p.s.CallTimeout + time.Second):
		return fmt.Errorf("consumer: pipeline shutdown: handlers still running: %w", ctx.Err())
	}
}

// stop waits for every message to be answered, then ends the pipeline's
// goroutines and its lease keeper, and closes done.
func (p *Pipeline[T]) stop() {
	p.items.Wait()
	close(p.quit)
	p.mu.Lock()
	p.runClosed = true // every message is answered: nothing more is claimed
	p.workCond.Broadcast()
	p.mu.Unlock()
	p.loops.Wait()
	p.mu.Lock()
	p.timer.Stop()
	p.timerAt = -1 // never armed again
	p.mu.Unlock()
	p.keep.stop()
	close(p.done)
}

// abandon gives up on what has not started (shutdown): waiting messages are
// answered ErrNotRun, running handlers see their contexts cancelled, and their
// claims are released when they return.
func (p *Pipeline[T]) abandon() {
	p.mu.Lock()
	p.abandoned.Store(true)
	waiting := p.ready
	p.ready = nil
	for _, first := range p.inflight {
		first.lease.cancel(ErrPipelineStopped)
	}
	p.mu.Unlock()
	for _, it := range waiting {
		p.finish(it, notRun[T](it.Key, ErrPipelineStopped))
	}
}
