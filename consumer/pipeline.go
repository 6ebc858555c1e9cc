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
// whatever is waiting in one call (up to WithMaxBatch), starts each handler as soon
// as its claim returns, and settles finished handlers the same way, with up to
// WithCallsInFlight claim calls and as many settle calls under way at once, so
// that the store, the handlers and the caller work at the same time. When idle it
// waits for nothing: a lone message is claimed at once.
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

	slots       chan struct{}  // one per message accepted and not yet settled
	runq        chan *pitem[T] // claimed, waiting for a handler worker
	workers     int            // handler workers started (at most cfg.concurrency); under mu
	claimCalls  chan struct{}  // one per claim call under way
	settleCalls chan struct{}  // one per settle or release call under way

	mu        sync.Mutex
	ready     []*pitem[T] // accepted, waiting to be claimed
	settling  []*pitem[T] // handled, waiting to be settled
	inflight  map[Key]*pitem[T]
	stopped   bool          // Shutdown began: no more messages
	abandoned atomic.Bool   // Shutdown's wait ran out: nothing more starts, running handlers are cancelled; set under mu
	wake      chan struct{} // a claim or a settlement may be due
	quit      chan struct{}
	stopOnce  sync.Once
	done      chan struct{} // closed once every message is answered and every goroutine has ended
	loops     sync.WaitGroup
	items     sync.WaitGroup // messages accepted and not yet settled
}

// PipelineItem is one message for a Pipeline.
type PipelineItem[T any] struct {
	Key     Key
	Payload []byte // fingerprinted, as by ExecuteIdempotently
	// Run is the message's handler. Its context is the one given to Submit, cancelled
	// with a *LeaseLostError cause if the claim is lost, and carries Info.
	Run func(ctx context.Context) (T, error)
	// Done receives the message's result once it is settled. It is called from the
	// pipeline's goroutines, once, and should return quickly.
	Done func(Result[T])
}

// pitem is a message inside the pipeline: once claimed, an attempt.
type pitem[T any] struct {
	PipelineItem[T]
	attempt[T]
	ctx       context.Context // Submit's, for the handler
	fp        Fingerprint
	hctx      itemCtx // the handler's context, once claimed
	result    Result[T]
	sent      time.Time   // when its claim call was sent
	unguarded error       // the store's error, when WithFailOpen runs it without a claim
	next      []*pitem[T] // messages of the same key waiting for this one
}

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

// WithMaxBatch bounds how many messages one claim or settle call carries.
// Default 100.
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
		engine: engine{store: store, s: s, keep: newKeeper(ctx, store, s), source: cfg.source},
		cfg:    cfg,
		slots:  make(chan struct{}, cfg.window), runq: make(chan *pitem[T], cfg.window),
		claimCalls: make(chan struct{}, cfg.calls), settleCalls: make(chan struct{}, cfg.calls),
		inflight: make(map[Key]*pitem[T]),
		wake:     make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}),
	}
	p.stopCause = p.abandonCause
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
	if it.Run == nil || it.Done == nil {
		return configError("pipeline item without Run or Done")
	}
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-p.quit:
		return ErrPipelineStopped
	}
	pi := &pitem[T]{PipelineItem: it, ctx: ctx}
	if err := it.Key.Validate(); err != nil {
		<-p.slots
		it.Done(Result[T]{Outcome: Error, Key: it.Key, Err: err})
		return nil
	}
	if p.s.Fingerprint {
		pi.fp = FingerprintOf(it.Payload)
	}
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		<-p.slots
		return ErrPipelineStopped
	}
	p.items.Add(1)
	if first := p.inflight[it.Key]; first != nil {
		first.next = append(first.next, pi) // runs once the first settles
	} else {
		p.inflight[it.Key] = pi
		p.ready = append(p.ready, pi)
	}
	p.mu.Unlock()
	p.poke()
	return nil
}

func (p *Pipeline[T]) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// loop starts claim and settle calls whenever something waits and a call may go.
func (p *Pipeline[T]) loop(ctx context.Context) {
	defer p.loops.Done()
	for {
		select {
		case <-p.wake:
		case <-p.quit:
			return
		}
		for p.startCall(ctx) {
		}
	}
}

// startCall starts one settle call or one claim call if one is due and a call slot
// is free; it reports whether it did. Settlements go first: they free the window.
func (p *Pipeline[T]) startCall(ctx context.Context) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.settling) > 0 && acquire(p.settleCalls) {
		batch := take(&p.settling, p.cfg.maxBatch)
		p.spawn(p.settleCalls, func() { p.settle(ctx, batch) })
		return true
	}
	if len(p.ready) > 0 && acquire(p.claimCalls) {
		batch := take(&p.ready, p.cfg.maxBatch)
		p.spawn(p.claimCalls, func() { p.claim(ctx, batch) })
		return true
	}
	return false
}

// acquire takes a slot of sem if one is free.
func acquire(sem chan struct{}) bool {
	select {
	case sem <- struct{}{}:
		return true
	default:
		return false
	}
}

// spawn runs call in a goroutine that gives its slot of sem back and pokes the loop.
func (p *Pipeline[T]) spawn(sem chan struct{}, call func()) {
	p.loops.Add(1)
	go func() {
		defer p.loops.Done()
		defer func() { <-sem; p.poke() }()
		call()
	}()
}

// take removes and returns up to n items from the front of *q.
func take[E any](q *[]E, n int) []E {
	n = min(n, len(*q))
	out := make([]E, n)
	copy(out, *q)
	rest := copy(*q, (*q)[n:])
	clear((*q)[rest:])
	*q = (*q)[:rest]
	return out
}

// claim claims batch in one call and starts the handlers of what it claimed.
func (p *Pipeline[T]) claim(ctx context.Context, batch []*pitem[T]) {
	claims := make([]Claim, len(batch))
	owners := newOwners(len(batch))
	for i, it := range batch {
		claims[i] = Claim{Key: it.Key, Owner: owners[i], Fingerprint: it.fp}
	}
	sent := time.Now()
	reps, resent := claimAll(ctx, p.store, p.s, claims)
	if p.s.watchClaims() {
		reportClaim(p.s, reps, time.Since(sent))
	}
	for i, it := range batch {
		it.sent = sent
		rep := reps[i] // claimAll answers every claim
		if p.s.Completions != nil {
			rep = completedElsewhere(ctx, p.s, it.Key, rep)
		}
		switch {
		case runsUnguarded(p.s, rep):
			it.unguarded = rep.Err
			p.runq <- it
			p.addWorker()
		case rep.Err != nil:
			p.finish(it, Result[T]{Outcome: Error, Key: it.Key, Err: rep.Err})
		case rep.Claimed():
			p.mu.Lock() // abandon reads the lease under mu
			it.attempt.hctx, it.res = &it.hctx, &it.result
			it.claimed(it.ctx, &p.engine, &claims[i], rep)
			p.mu.Unlock()
			if needsMark(rep, resent, i) {
				it.mark = &claims[i]
			}
			p.keep.add(&it.lease, sent, rep.Lease)
			p.runq <- it // never blocks: the window bounds what is claimed
			p.addWorker()
		default:
			p.finish(it, resolve[T](p.s, it.Key, rep))
		}
	}
}

// addWorker starts one more handler worker while fewer run than allowed and some
// claimed message waits.
func (p *Pipeline[T]) addWorker() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.workers >= p.cfg.concurrency || len(p.runq) == 0 {
		return
	}
	p.workers++
	p.loops.Add(1)
	go p.work()
}

// work runs claimed messages' handlers, one at a time, until Shutdown closes runq.
func (p *Pipeline[T]) work() {
	defer p.loops.Done()
	for it := range p.runq {
		p.run(it)
	}
}

// run runs one claimed message's handler (see attempt.run), then queues its
// settlement.
func (p *Pipeline[T]) run(it *pitem[T]) {
	if it.unguarded != nil {
		p.finish(it, runUnguarded(it.ctx, p.s, it.Key, it.unguarded, itemCall(it.Run)))
		return
	}
	it.attempt.run(it.ctx, &p.engine, itemCall(it.Run))
	p.mu.Lock()
	p.settling = append(p.settling, it)
	p.mu.Unlock()
	p.poke()
}

// itemCall is how the pipeline calls a message's handler.
func itemCall[T any](run func(context.Context) (T, error)) handlerCall[T] {
	return handlerCall[T]{fn: func(ctx context.Context, _ int, _ BatchItem) (T, error) { return run(ctx) }}
}

// settle settles a batch of handled messages (see settle), then answers each, or
// queues its settlement to be sent again after a pause.
func (p *Pipeline[T]) settle(ctx context.Context, batch []*pitem[T]) {
	as := make([]*attempt[T], len(batch))
	for n, it := range batch {
		it.decide(it.ctx, &p.engine)
		as[n] = &it.attempt
	}
	settle(ctx, &p.engine, as)
	for _, it := range batch {
		if it.resend {
			p.again(it)
			continue
		}
		p.finish(it, it.result)
	}
}

// again queues it's settlement to be sent once more after a pause.
func (p *Pipeline[T]) again(it *pitem[T]) {
	p.loops.Add(1)
	time.AfterFunc(resendPause(it.tries), func() {
		defer p.loops.Done()
		p.mu.Lock()
		p.settling = append(p.settling, it)
		p.mu.Unlock()
		p.poke()
	})
}

// finish answers it, lets the next message of its key go, and frees its slot.
func (p *Pipeline[T]) finish(it *pitem[T], r Result[T]) {
	if it.lease.cancel != nil {
		p.keep.finish(&it.lease)
		it.lease.cancel(context.Canceled)
	}
	if p.s.watchOutcomes() {
		var took time.Duration
		if !it.sent.IsZero() {
			took = time.Since(it.sent)
		}
		reportOutcome(it.ctx, p.s, p.source, &r, took)
	}
	it.Done(r)
	p.mu.Lock()
	var unrun *pitem[T]
	switch {
	case len(it.next) > 0 && p.abandoned.Load():
		unrun = it.next[0]
		unrun.next = it.next[1:]
		p.inflight[it.Key] = unrun
	case len(it.next) > 0:
		n := it.next[0]
		n.next = it.next[1:]
		p.inflight[it.Key] = n
		p.ready = append([]*pitem[T]{n}, p.ready...)
	default:
		delete(p.inflight, it.Key)
	}
	p.mu.Unlock()
	<-p.slots
	p.items.Done()
	if unrun != nil {
		p.finish(unrun, notRun[T](unrun.Key, ErrPipelineStopped))
	}
	p.poke()
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
	close(p.runq) // every message is answered: nothing more is claimed
	p.loops.Wait()
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
		if first.lease.cancel != nil {
			first.lease.cancel(ErrPipelineStopped)
		}
	}
	p.mu.Unlock()
	for _, it := range waiting {
		p.finish(it, notRun[T](it.Key, ErrPipelineStopped))
	}
}
