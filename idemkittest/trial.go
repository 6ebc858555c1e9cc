package idemkittest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit/consumer"
)

// concurrentDeliveries is how many deliveries ConcurrentDeliveries makes at once.
const concurrentDeliveries = 8

// errWorkerCrashed is what the handler of an attempt whose worker crashed before
// it started "returns" to the library in the test process; no store sees it.
var errWorkerCrashed = errors.New("idemkittest: the worker crashed before the handler started")

// trial is one run of one scenario.
type trial[T any] struct {
	*env
	ctx      context.Context
	msg      Message
	fn       func(ctx context.Context) (T, error)
	scenario Scenario
	base     int // the effect count after the reset

	runs       atomic.Int32
	mu         sync.Mutex
	deliveries []Delivery
	herrs      []error // errors the handler returned on its own (not cut short by the kit)
	problem    string  // a failure the counts do not show
	skipped    string
	final      consumer.Result[T] // the last delivery
	fences     [2]int64           // LeaseLost: the fences of the first and second owner
	err        error              // the kit could not go on
}

// run runs the scenario, then the last delivery, and returns the verdict so far.
func (t *trial[T]) run() Verdict {
	switch t.scenario {
	case DuplicateAfterCompletion:
		t.settle("")
	case ConcurrentDeliveries:
		t.concurrent()
	case CrashBeforeHandler:
		t.crashBefore()
	case CrashAfterEffect:
		t.crashAfterEffect()
	case CrashAfterCompletion:
		t.crashAfterCompletion()
	case LeaseLost:
		t.leaseLost()
	case StoreDownAtClaim:
		t.downAtClaim()
	case StoreDownAtCompletion:
		t.downAtCompletion()
	case CompletionReplyLost:
		t.replyLost()
	case AfterRetention:
		t.afterRetention()
	}
	if t.skipped == "" && t.err == nil {
		t.fs.Clear()
		t.final = t.deliver("the last delivery", nil)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return Verdict{Scenario: t.scenario, Runs: int(t.runs.Load()), Deliveries: append([]Delivery(nil), t.deliveries...),
		Skipped: t.skipped}
}

// call runs the user's handler, counting the run.
func (t *trial[T]) call(ctx context.Context) (T, error) {
	t.runs.Add(1)
	v, err := t.fn(ctx)
	if err != nil && ctx.Err() == nil {
		t.mu.Lock()
		t.herrs = append(t.herrs, err)
		t.mu.Unlock()
	}
	return v, err
}

// deliver delivers the message once through the engine, with handler h (the
// user's when nil), and records the delivery under note.
func (t *trial[T]) deliver(note string, h func(ctx context.Context) (T, error)) consumer.Result[T] {
	if h == nil {
		h = t.call
	}
	t.mu.Lock()
	i := len(t.deliveries)
	t.deliveries = append(t.deliveries, Delivery{Note: note})
	t.mu.Unlock()
	r := consumer.ExecuteIdempotently(t.ctx, t.fs, t.msg.Key, t.msg.Payload, h)
	t.record(i, r)
	return r
}

func (t *trial[T]) record(i int, r consumer.Result[T]) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.deliveries[i].Outcome, t.deliveries[i].Err, t.deliveries[i].Fence = r.Outcome, r.Err, r.Fence
}

// settle delivers the message until a delivery settles (its action is to ack
// or to dead-letter), as a broker redelivers: a retryable error is delivered
// again at once, and IN_PROGRESS once the other owner's lease has run out.
func (t *trial[T]) settle(note string) consumer.Result[T] {
	var r consumer.Result[T]
	limit := t.s.MaxAttempts + 3
	for n := 0; n < limit && t.err == nil; n++ {
		r = t.deliver(note, nil)
		note = ""
		switch r.Action() {
		case consumer.Ack, consumer.DeadLetter:
			return r
		case consumer.Wait:
			t.expireLease()
		}
	}
	t.fail(fmt.Sprintf("the message did not settle in %d deliveries (the last: %v, %v)", limit, r.Outcome, r.Err))
	return r
}

// fail records a failure the counts do not show; the first one stands.
func (t *trial[T]) fail(problem string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.problem == "" {
		t.problem = problem
	}
}

// info is the attempt's key and fence inside a handler.
func info(ctx context.Context) consumer.Info {
	in, _ := consumer.InfoFromContext(ctx)
	return in
}

// concurrent: eight deliveries at once; the claim holder waits, before it runs
// the handler, until every delivery has sent its claim (or 10s have passed), so
// that they all meet a live claim. Those told IN_PROGRESS are delivered again
// afterwards, as a broker would.
func (t *trial[T]) concurrent() {
	before := t.fs.Calls(OpBegin)
	hold := func(ctx context.Context) (T, error) {
		deadline := time.Now().Add(maxWait)
		for t.fs.Calls(OpBegin)-before < concurrentDeliveries && time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		return t.call(ctx)
	}
	start := make(chan struct{})
	results := make([]consumer.Result[T], concurrentDeliveries)
	idx := make([]int, concurrentDeliveries)
	t.mu.Lock()
	for i := range idx {
		idx[i] = len(t.deliveries)
		t.deliveries = append(t.deliveries, Delivery{Note: "concurrent"})
	}
	t.mu.Unlock()
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i] = consumer.ExecuteIdempotently(t.ctx, t.fs, t.msg.Key, t.msg.Payload, hold)
		}()
	}
	close(start)
	wg.Wait()
	succeeded := 0
	for i, r := range results {
		t.record(idx[i], r)
		if r.Outcome == consumer.Success {
			succeeded++
		}
	}
	if succeeded > 1 {
		t.fail(fmt.Sprintf("%d of the %d concurrent deliveries ran the handler to SUCCESS; one owner at a time may hold a key: "+
			"run the store's conformance suite (package consumertest)", succeeded, concurrentDeliveries))
	}
	for _, r := range results {
		if r.Action() != consumer.Ack && r.Action() != consumer.DeadLetter {
			t.settle("redelivered")
		}
	}
}

// crashBefore: the worker dies between its claim and its handler.
func (t *trial[T]) crashBefore() {
	t.deliver("crashed before the handler", func(ctx context.Context) (T, error) {
		in := info(ctx)
		t.fs.Crash(in.Key, in.Fence)
		var zero T
		return zero, errWorkerCrashed
	})
	t.expireLease()
	t.settle("redelivered after the lease")
}

// crashAfterEffect: the worker dies once the handler has returned, before its
// completion is sent.
func (t *trial[T]) crashAfterEffect() {
	t.deliver("crashed after the handler, before its completion", func(ctx context.Context) (T, error) {
		v, err := t.call(ctx)
		in := info(ctx)
		t.fs.Crash(in.Key, in.Fence)
		return v, err
	})
	t.expireLease()
	t.settle("redelivered after the lease")
}

// crashAfterCompletion: the completion is applied and the worker dies before
// its reply (and the ack) comes.
func (t *trial[T]) crashAfterCompletion() {
	t.inject(Fault{Op: OpSettle, Key: t.msg.Key, Action: LoseReply, Crash: true})
	t.deliver("crashed as its completion was applied, before the ack", nil)
	t.expireLease()
	t.settle("redelivered")
}

// leaseLost: inside the first owner's handler, before the user's code runs,
// its renewals fail until the engine cancels its context; its lease then runs
// out on the store, a second owner takes the key over and completes it, and
// the user's handler runs on the first owner's (cancelled) context.
func (t *trial[T]) leaseLost() {
	var first atomic.Bool
	bound := 3*t.s.Lease + maxWait
	r1 := t.deliver("first owner: its lease was lost while its handler ran", func(ctx context.Context) (T, error) {
		if !first.CompareAndSwap(false, true) {
			return t.call(ctx)
		}
		in := info(ctx)
		t.inject(Fault{Op: OpExtend, Key: in.Key, Fence: in.Fence, Count: Forever})
		timer := time.NewTimer(bound)
		defer timer.Stop()
		select {
		case <-ctx.Done():
		case <-timer.C:
			t.fail(fmt.Sprintf("idemkit did not cancel the handler's context within %v of its renewals failing (lease %v)", bound, t.s.Lease))
		}
		t.expireLease()
		r2 := t.settle("second owner, after the first one's lease ran out")
		t.mu.Lock()
		t.fences = [2]int64{in.Fence, r2.Fence}
		t.mu.Unlock()
		return t.call(ctx)
	})
	t.mu.Lock()
	second := t.fences[1]
	t.mu.Unlock()
	switch {
	case r1.Outcome == consumer.Success:
		t.fail(fmt.Sprintf("the first owner's completion (fence %d) was accepted after a second owner (fence %d) took the key over: "+
			"the store must refuse a settlement whose owner no longer holds the claim (compare-and-set on the owner token)",
			r1.Fence, second))
	case second != 0 && second <= r1.Fence:
		t.fail(fmt.Sprintf("the second owner's fence %d is not above the first owner's %d: the store must raise the fence on every takeover",
			second, r1.Fence))
	}
}

// downAtClaim: the claim meets a store that cannot be reached; the redelivery
// finds it back.
func (t *trial[T]) downAtClaim() {
	t.inject(Fault{Op: OpBegin, Key: t.msg.Key})
	t.settle("the store was down")
}

// downAtCompletion: every call of the attempt fails from the moment its
// handler returns, until idemkit gives up on its completion (its lease has run
// out); then the store is back, and the message is redelivered.
func (t *trial[T]) downAtCompletion() {
	t.deliver("the store went down as its handler returned", func(ctx context.Context) (T, error) {
		v, err := t.call(ctx)
		in := info(ctx)
		for _, op := range []Op{OpSettle, OpExtend, OpRelease} {
			t.inject(Fault{Op: op, Key: in.Key, Fence: in.Fence, Count: Forever})
		}
		return v, err
	})
	t.fs.Clear()
	t.expireLease()
	t.settle("redelivered once the store was back")
}

// replyLost: the completion is applied, its reply lost; idemkit sends it again.
func (t *trial[T]) replyLost() {
	t.inject(Fault{Op: OpSettle, Key: t.msg.Key, Action: LoseReply})
	r := t.settle("its completion's reply was lost")
	t.mu.Lock()
	firstOutcome, firstErr := t.deliveries[0].Outcome, t.deliveries[0].Err
	t.mu.Unlock()
	if firstOutcome == consumer.Error && errors.Is(firstErr, consumer.ErrLeaseLost) {
		t.fail(fmt.Sprintf("the completion sent again after its lost reply was answered %v: "+abouts[CompletionReplyLost].fix, firstErr))
	}
	_ = r
}

// afterRetention: the message completes, its record expires, and it comes again.
func (t *trial[T]) afterRetention() {
	t.settle("")
	if t.expireRecord(); t.skipped != "" || t.err != nil {
		return
	}
	t.settle("after the retention")
}

// inject adds a fault the kit built; an error is the kit's own.
func (t *trial[T]) inject(f Fault) {
	if err := t.fs.Inject(f); err != nil {
		t.setErr(err)
	}
}

func (t *trial[T]) setErr(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		t.err = err
	}
}

// expireLease makes the message's started record's lease run out on the store:
// it moves the clock past it, or waits until the store says it has run out.
func (t *trial[T]) expireLease() {
	rec, err := t.inner.Peek(t.ctx, t.msg.Key)
	switch {
	case err != nil:
		t.setErr(fmt.Errorf("reading the record to let its lease run out: %w", err))
		return
	case !rec.Found || rec.State != "started":
		return
	case t.clock != nil:
		t.clock.Advance(rec.LeaseUntil.Sub(rec.Now) + time.Millisecond)
		return
	}
	t.poll("its lease to run out", rec.LeaseUntil.Sub(rec.Now)+maxWait, func(rec consumer.Record) bool {
		return !rec.Found || rec.State != "started" || !rec.Now.Before(rec.LeaseUntil)
	})
}

// expireRecord makes the message's record expire: it moves the clock past its
// time to live, or waits for it when that is short; otherwise the scenario is
// skipped.
func (t *trial[T]) expireRecord() {
	rec, err := t.inner.Peek(t.ctx, t.msg.Key)
	switch {
	case err != nil:
		t.setErr(fmt.Errorf("reading the record to let it expire: %w", err))
	case !rec.Found:
	case t.clock != nil:
		t.clock.Advance(rec.TTL + time.Millisecond)
	case rec.TTL < 0:
		t.skipped = "the store's records have no time to live"
	case rec.TTL > maxWait:
		t.skipped = fmt.Sprintf("the store keeps the record %v more, and the kit waits at most %v on a store whose clock it "+
			"does not move: give the test's store consumer.WithRetention(time.Second), or use a memory store with the kit's "+
			"clock (WithClock)", rec.TTL.Round(time.Millisecond), maxWait)
	default:
		t.poll("the record to expire", rec.TTL+maxWait, func(rec consumer.Record) bool { return !rec.Found })
	}
}

// poll reads the record until done says so, or fails the kit after bound.
func (t *trial[T]) poll(what string, bound time.Duration, done func(consumer.Record) bool) {
	deadline := time.Now().Add(bound)
	every := min(max(t.s.Lease/20, 5*time.Millisecond), 100*time.Millisecond)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		rec, err := t.inner.Peek(t.ctx, t.msg.Key)
		switch {
		case err != nil:
			t.setErr(fmt.Errorf("reading the record while waiting for %s: %w", what, err))
			return
		case done(rec):
			return
		case time.Now().After(deadline):
			t.setErr(fmt.Errorf("waited %v for %s on the store's clock, in vain (the record: %s, lease until %v, store time %v)",
				bound, what, rec.State, rec.LeaseUntil, rec.Now))
			return
		}
		select {
		case <-tick.C:
		case <-t.ctx.Done():
			t.setErr(fmt.Errorf("waiting for %s: %w", what, t.ctx.Err()))
			return
		}
	}
}
