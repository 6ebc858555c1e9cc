package consumer

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"
)

// The attempt lifecycle, one for both engines (ExecuteIdempotently and
// ExecuteBatch, which replay runs on; the Pipeline, which the Kafka and RabbitMQ
// adapters run on): a claimed message becomes an attempt (claimed), its handler
// runs under the lease keeper (run), and it settles (settle.go: one decision, one
// resend-while-live rule, one release path). The engines differ only in how they
// feed attempts in and how they wait between resends (a sleep, a timer).
//
// Panics, on both engines alike:
//
//   - in the handler: recovered by callHandler as a *PanicError, which is the
//     handler's error: a retryable failure, recorded and counted like any other;
//   - around the handler, before it starts (a store wrapper while a taken-over
//     claim is marked, an observer's start hook): the handler does not start; the
//     claim is released and the result is ErrNotRun wrapping the *PanicError;
//   - around the handler, after it returned (an observer's end hook): logged; the
//     attempt settles as the handler returned;
//   - while claiming (the store's Begin, a store wrapper, a claim hook, a
//     CompletionLookup): every message of that claim call gets an Error with the
//     *PanicError (retryable; no handler ran); claims the store may have made
//     before the panic run out with their lease;
//   - in a Pipeline message's Done, or an outcome hook called before it: logged
//     with the result Done was given (key, outcome, action, error); the pipeline
//     goes on, and the message is answered once, as if Done had returned;
//   - while settling (a store wrapper's Settle, a settle hook): the attempts whose
//     settlement that call carried get an Error with the *PanicError, and their
//     leases are no longer renewed, so their claims run out on the store; a
//     release that panics changes no result (like a failed release, it only
//     delays the next claim until the lease runs out).
//
// Each is logged once, with its stack. Nothing panics out of an engine.

// engine is what runs attempts: the store, its settings, the keeper of the
// attempts' leases, the source its observers see, and its stop.
type engine struct {
	store  Store
	s      Settings
	keep   *keeper
	source string // HandlerEvent.Source, OutcomeEvent.Source
	// stopCause is the engine's stop once it gives up on its attempts (a
	// Pipeline's Shutdown whose wait ran out: ErrPipelineStopped), nil while it
	// runs; a nil func for an engine that never stops on its own (ExecuteBatch).
	stopCause func() error
}

// stoppedBy is the engine's stop, or nil while it runs.
func (e *engine) stoppedBy() error {
	if e.stopCause == nil {
		return nil
	}
	return e.stopCause()
}

// attempt is one claimed message from its claim to its settlement, on either
// engine: ExecuteBatch keeps a pass's attempts in one slice (reused by later
// batches: see scratch), the Pipeline one in each of its messages. One goroutine
// at a time writes it: the one that claimed it, then the one running its
// handler, then the one settling it.
type attempt[T any] struct {
	st    Settlement // the claim; once decided, its settlement
	lease lease      // kept by the engine's keeper from the claim to the settlement
	// hctx is the handler's context, a child of the caller's; never reused, since a
	// handler may keep its context.
	hctx *itemCtx
	res  *Result[T] // where its result goes (ExecuteBatch's output, a Pipeline message's)
	mark *Claim     // a claim to mark counted before the handler starts (see needsMark); nil otherwise

	value   T
	herr    error
	started bool

	verdict verdict         // what settling it comes to: decided once (decideAll)
	lost    *LeaseLostError // the lease's loss as decideAll read it
	tries   int             // settlements sent
	resend  bool            // the last settlement met an unreachable store while the claim was live
}

// claimed makes a the attempt of claim c, which the store answered rep: its
// handler's context, which a.hctx points to, derives from parent (the caller's),
// and its result goes to a.res. The caller then gives the lease to the keeper.
func (a *attempt[T]) claimed(parent context.Context, e *engine, c *Claim, rep *ClaimReply) {
	a.hctx.init(parent)
	a.lease = lease{ctx: a.hctx}
	a.claimedFrom(e, c, rep)
}

// claimedIn makes a the attempt of claim c, which the store answered rep, when its
// handler's context (a.hctx, which a.lease.ctx points to) was made before the
// claim: a Pipeline makes it when a message is submitted.
func (a *attempt[T]) claimedIn(e *engine, c *Claim, rep ClaimReply) { a.claimedFrom(e, c, &rep) }

// claimedFrom is claimedIn without copying the reply.
func (a *attempt[T]) claimedFrom(e *engine, c *Claim, rep *ClaimReply) {
	a.st = Settlement{Key: c.Key, Owner: c.Owner, Ref: rep.Ref, Fence: rep.Fence,
		Attempts: rep.Attempts, Created: rep.Created, Fingerprint: rep.Fingerprint}
	a.hctx.info = Info{Key: c.Key, Scope: e.s.Scope, Attempt: rep.Attempts, Fence: rep.Fence}
	a.lease.claim = &a.st // the claim fields never change while kept
	*a.res = Result[T]{Key: c.Key, Attempt: rep.Attempts, Fence: rep.Fence}
}

// handlerCall is how an engine calls a handler: run when set (a Pipeline
// message's), else fn with the item's index and item.
type handlerCall[T any] struct {
	run  func(ctx context.Context) (T, error)
	fn   BatchHandler[T]
	i    int
	item BatchItem
}

// mayStart reports whether a's handler may start: its context is live (its lease
// was not lost, its caller did not give up, nothing refused its start) and the
// engine runs.
func (a *attempt[T]) mayStart(e *engine) bool {
	return a.hctx.Err() == nil && e.stoppedBy() == nil
}

// run runs a's handler through call, unless a may not start (see mayStart) before
// its handler's turn or after its claim was marked counted; ctx is the caller's.
// Panics outside the handler are contained as the package's panic policy says.
func (a *attempt[T]) run(ctx context.Context, e *engine, call handlerCall[T]) {
	defer func() {
		if p := recover(); p != nil {
			perr := contained(e.s, "running a handler", p, 1)
			if !a.started {
				a.lease.cancel(perr) // not started: released, not counted
			}
		}
	}()
	if !a.mayStart(e) {
		return
	}
	if a.mark != nil {
		if err := markStart(ctx, e.store, e.s, *a.mark, a.st.Fence); err != nil {
			a.lease.cancel(err) // not started: released, not counted
			return
		}
		if !a.mayStart(e) {
			return
		}
	}
	var hctx context.Context = a.hctx
	var end func(error)
	if e.s.watchHandlers() {
		hctx, end = startHandler(hctx, e.s, e.source, &a.hctx.info)
	}
	a.started = true
	a.value, a.herr = callHandler(hctx, call)
	if end != nil {
		end(a.herr)
	}
}

// callHandler runs call's handler, turning a panic into a *PanicError.
func callHandler[T any](ctx context.Context, call handlerCall[T]) (v T, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &PanicError{Value: p, Stack: debug.Stack()}
		}
	}()
	if call.run != nil {
		return call.run(ctx)
	}
	return call.fn(ctx, call.i, call.item)
}

// claimContained is claimAll followed, with a CompletionLookup, by
// completedElsewhere for each reply; the replies go to out when it has room (see
// beginBounded). A panic on the way (in the store's Begin, a
// store wrapper, a claim hook, a CompletionLookup) is contained: every claim is
// then answered with the *PanicError (a retryable error; the claims the store may
// have made run out with their lease).
func claimContained(ctx context.Context, e *engine, claims []Claim, out []ClaimReply) (reps []ClaimReply, resent []bool, sent time.Time) {
	defer func() {
		if p := recover(); p != nil {
			perr := contained(e.s, "claiming", p, len(claims))
			reps, resent = make([]ClaimReply, len(claims)), nil
			for i := range reps {
				reps[i].Err = perr
			}
		}
	}()
	sent = time.Now()
	reps, resent = claimAll(ctx, e.store, e.s, claims, out)
	if e.s.watchClaims() {
		reportClaim(e.s, reps, time.Since(sent))
	}
	if e.s.Completions != nil {
		for i := range reps {
			reps[i] = completedElsewhere(ctx, e.s, claims[i].Key, reps[i])
		}
	}
	return reps, resent, sent
}

// contained turns p, a panic recovered outside any handler while doing what (for
// n messages), into a *PanicError, and logs it with its stack and attrs.
func contained(s Settings, what string, p any, n int, attrs ...any) *PanicError {
	perr := &PanicError{Value: p, Stack: debug.Stack()}
	s.Logger.Error("consumer: panic outside the handler, contained", append([]any{"while", what, "messages", n,
		"panic", fmt.Sprint(p), "stack", string(perr.Stack)}, attrs...)...)
	return perr
}

// runUnguarded runs call's handler without a claim, for key, because the store
// could not be reached (why) and WithFailOpen says so.
func runUnguarded[T any](ctx context.Context, s Settings, key Key, why error, call handlerCall[T]) Result[T] {
	s.Logger.Warn("consumer: store unavailable: running handler unguarded (fail-open)",
		"key", string(key), "scope", s.Scope, "err", why)
	v, err := callHandler(withInfo(ctx, Info{Key: key, Scope: s.Scope, Unguarded: true}), call)
	if err != nil {
		return Result[T]{Outcome: Error, Err: err, Key: key, Unguarded: true}
	}
	return Result[T]{Outcome: Success, Value: v, Key: key, Unguarded: true}
}
