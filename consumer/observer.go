package consumer

import (
	"context"
	"errors"
	"time"

	"github.com/idemkit/idemkit/internal/observe"
)

// Observer watches executions, for metrics and tracing: the one registry of
// idemkit's events. An observer implements any of the hook interfaces below; the
// core reports to ClaimHook, HandlerHook, LeaseHook, SettleHook, OutcomeHook and
// TraceHook, the broker adapters also to RetryHook, DeadLetterHook, CommitHook,
// AckHook and PauseHook. Adding a hook interface later never breaks an observer.
// Hooks are called synchronously on the paths they watch: keep them fast, and never
// block. Events are structs so that fields can be added; what an adapter knows of
// a message (its Kafka coordinates, its RabbitMQ queue and delivery tag) travels in
// their Origin. Install observers with WithObserver; the core, the broker adapters,
// the HTTP middleware and replay all report to the observers of the store they
// use.
type Observer any

// ClaimHook is told of every claim call: how many messages it carried and what
// they found, and how long the store took.
type ClaimHook interface{ OnClaim(ClaimEvent) }

// HandlerHook is told when a handler starts and when it returns.
type HandlerHook interface {
	OnHandlerStart(HandlerEvent)
	OnHandlerEnd(HandlerEvent)
}

// LeaseHook is told of every lease renewal call and of every lease lost.
type LeaseHook interface {
	OnLeaseRenewed(LeaseEvent)
	OnLeaseLost(LeaseEvent)
}

// SettleHook is told of every settle call: how many messages and how long.
type SettleHook interface{ OnSettle(SettleEvent) }

// OutcomeHook is told the outcome of every execution, once: for a broker adapter,
// of every delivery it ran (Kafka's in-place retries each run again: a record's
// final outcome is the one whose Action is Ack, or its DeadLetterEvent).
type OutcomeHook interface{ OnOutcome(OutcomeEvent) }

// RetryHook is told of every retry an adapter schedules: the Kafka adapter's
// retries in place of a handler's failure; every copy the RabbitMQ worker sends to
// a delayed-retry queue (a handler's failure, a key in progress elsewhere, a store
// outage), once the broker confirmed it.
type RetryHook interface{ OnRetry(RetryEvent) }

// DeadLetterHook is told of every dead-letter copy the broker confirmed.
type DeadLetterHook interface{ OnDeadLetter(DeadLetterEvent) }

// CommitHook is told of every offset an adapter committed, with the lag then, and
// of every commit that failed (CommitEvent.Err).
type CommitHook interface{ OnCommit(CommitEvent) }

// AckHook is told of every acknowledgement an adapter sent.
type AckHook interface{ OnAck(AckEvent) }

// PauseHook is told when an adapter stops taking messages from a source, and when
// it takes them again: a Kafka topic whose dead-letter topic cannot be used is
// paused (PauseEvent.Err says why; it is a *kafka.DeadLetterTopicError) until it
// can; a RabbitMQ worker pauses for every session lost or refused (Err is what
// ended it) before it reconnects, and resumes once it consumes again.
type PauseHook interface {
	OnPause(PauseEvent)
	OnResume(PauseEvent)
}

// TraceHook lets a tracer wrap every handler run and carry trace context onto the
// copies the broker adapters produce of a delivered message (the Kafka adapters'
// dead letters, the RabbitMQ worker's retry and dead-letter copies). StartHandler
// is called before the handler with its context, which holds the message's Carrier
// when an adapter fed it (the producer's trace context is in its headers:
// CarrierFromContext); the context it returns is the handler's, and end is called
// with the finished event. That context must derive from ctx (context.WithValue and
// the like): the adapters find in it the message the handler runs for, and a run
// given a context without it ends in a handler error, the handler not called.
// Inject writes the context's trace into a copy's headers through set: the adapters
// call it with the handler's context of the message's last run, so the copy carries
// the span of that run, or, when no handler ran for it (undecodable, no key, a
// duplicate of a failed key), with a context that holds only the delivered
// message's Carrier, so the copy carries the message's own trace context. An Inject
// that panics is recovered and logged at Error: that copy goes without the tracer's
// headers.
type TraceHook interface {
	StartHandler(ctx context.Context, e HandlerEvent) (_ context.Context, end func(HandlerEvent))
	Inject(ctx context.Context, set func(key, value string))
}

// Carrier gives read access to a message's headers, for tracers: the broker
// adapters put the delivered message's headers in the context of its execution,
// and a loop of your own over another broker can with ContextWithCarrier.
type Carrier interface {
	Get(key string) string
	Keys() []string
}

// ContextWithCarrier returns ctx holding c, the headers of the message the
// executions made with ctx run for: tracers read the producer's trace context
// from them (CarrierFromContext, OutcomeEvent.Carrier). The broker adapters do it
// for every message; call it when you feed ExecuteIdempotently or a Pipeline from
// a broker idemkit has no adapter for.
func ContextWithCarrier(ctx context.Context, c Carrier) context.Context {
	m := &observe.Message{Headers: c}
	if old := observe.MessageOf(ctx); old != nil {
		m.Origin = old.Origin
	}
	return observe.WithMessage(ctx, m)
}

// CarrierFromContext returns the headers of the message being handled, if an
// adapter put them there.
func CarrierFromContext(ctx context.Context) (Carrier, bool) {
	if m := observe.MessageOf(ctx); m != nil && m.Headers != nil {
		return m.Headers, true
	}
	return nil, false
}

// WithObserver adds observers to the store (see Observer). Default none.
func WithObserver(obs ...Observer) Option {
	return optFunc(func(s *Settings) {
		for _, o := range obs {
			if o != nil {
				s.Observers = append(s.Observers, o)
			}
		}
	})
}

// Error kinds, as ErrorKind names them: stable strings for metric labels and
// dead-letter headers.
const (
	KindPermanent        = "permanent"
	KindConflict         = "conflict"
	KindExhausted        = "exhausted"
	KindLeaseLost        = "lease_lost"
	KindStoreUnavailable = "store_unavailable"
	KindCorrupt          = "corrupt"
	KindUndecodable      = "undecodable"
	KindInvalidKey       = "invalid_key"
	KindNotRun           = "not_run"
	KindAbandoned        = "abandoned"
	KindInterrupted      = "interrupted"
	KindPanic            = "panic"
	KindConfig           = "config"
	KindHandler          = "handler" // any other handler error
	// KindNoKey is the adapters' own kind (never ErrorKind's) for a message that
	// carries no key; they dead-letter it as NO_KEY.
	KindNoKey = "no_key"
)

// ErrorKind names the kind of err: one of the Kind constants (KindNoKey aside), or
// "" for nil. The first that matches wins, in the order the constants are listed.
func ErrorKind(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrPermanent):
		return KindPermanent
	case errors.Is(err, ErrPayloadConflict):
		return KindConflict
	case errors.Is(err, ErrAttemptsExhausted):
		return KindExhausted
	case errors.Is(err, ErrLeaseLost):
		return KindLeaseLost
	case errors.Is(err, ErrStoreUnavailable):
		return KindStoreUnavailable
	case errors.Is(err, ErrCorruptRecord):
		return KindCorrupt
	case errors.Is(err, ErrUndecodableResult):
		return KindUndecodable
	case errors.Is(err, ErrInvalidKey):
		return KindInvalidKey
	case errors.Is(err, ErrNotRun):
		return KindNotRun
	case errors.Is(err, ErrAbandoned):
		return KindAbandoned
	case errors.Is(err, ErrInterrupted):
		return KindInterrupted
	case errors.Is(err, ErrHandlerPanic):
		return KindPanic
	case errors.Is(err, ErrInvalidConfig), errors.Is(err, ErrNilHandler):
		return KindConfig
	}
	return KindHandler
}

// hooks are the observers of a store sorted by the core's hook interfaces once, so
// that the hot paths test a slice's length instead of type-asserting every
// observer for every message.
type hooks struct {
	claim   []ClaimHook
	handler []HandlerHook
	lease   []LeaseHook
	settle  []SettleHook
	outcome []OutcomeHook
	trace   []TraceHook
}

func sortHooks(obs []Observer) *hooks {
	if len(obs) == 0 {
		return nil
	}
	h := &hooks{}
	for _, o := range obs {
		if x, ok := o.(ClaimHook); ok {
			h.claim = append(h.claim, x)
		}
		if x, ok := o.(HandlerHook); ok {
			h.handler = append(h.handler, x)
		}
		if x, ok := o.(LeaseHook); ok {
			h.lease = append(h.lease, x)
		}
		if x, ok := o.(SettleHook); ok {
			h.settle = append(h.settle, x)
		}
		if x, ok := o.(OutcomeHook); ok {
			h.outcome = append(h.outcome, x)
		}
		if x, ok := o.(TraceHook); ok {
			h.trace = append(h.trace, x)
		}
	}
	return h
}

// hooked returns s's sorted hooks, sorting them if s was built by hand.
func (s *Settings) hooked() *hooks {
	if s.hooks == nil && len(s.Observers) > 0 {
		return sortHooks(s.Observers)
	}
	return s.hooks
}

func (s *Settings) watchClaims() bool { h := s.hooked(); return h != nil && len(h.claim) > 0 }
func (s *Settings) watchHandlers() bool {
	h := s.hooked()
	return h != nil && len(h.handler)+len(h.trace) > 0
}
func (s *Settings) watchLeases() bool   { h := s.hooked(); return h != nil && len(h.lease) > 0 }
func (s *Settings) watchSettles() bool  { h := s.hooked(); return h != nil && len(h.settle) > 0 }
func (s *Settings) watchOutcomes() bool { h := s.hooked(); return h != nil && len(h.outcome) > 0 }

// reportClaim tells the observers of one claim call.
func reportClaim(s Settings, reps []ClaimReply, took time.Duration) {
	e := ClaimEvent{Scope: s.Scope, Messages: len(reps), Latency: took}
	for i := range reps {
		switch rep := &reps[i]; {
		case rep.Err != nil:
			e.Errors++
		case rep.Claimed():
			e.Claimed++
			if rep.Status == StatusTakenOver {
				e.TakenOver++
			}
		case rep.Status == StatusCompleted || rep.Status == StatusFailed:
			e.Duplicates++
		case rep.Status == StatusInProgress:
			e.InProgress++
		case rep.Status == StatusConflict:
			e.Conflicts++
		default:
			e.Errors++
		}
	}
	for _, h := range s.hooked().claim {
		h.OnClaim(e)
	}
}

// reportOutcome tells the observers of one message's outcome.
// ctx is the context the message was executed with (for its origin and Carrier).
func reportOutcome[T any](ctx context.Context, s Settings, source string, r *Result[T], took time.Duration) {
	e := OutcomeEvent{Source: sourceOf(ctx, source), Scope: s.Scope, Key: r.Key, Outcome: r.Outcome, Action: r.Action(),
		Kind: ErrorKind(r.Err), Attempt: r.Attempt, Fence: r.Fence, Duration: took}
	if ctx != nil {
		if m := observe.MessageOf(ctx); m != nil {
			e.Origin = originOf(m)
			if m.Headers != nil {
				e.Carrier = m.Headers
			}
		}
	}
	for _, h := range s.hooked().outcome {
		h.OnOutcome(e)
	}
}

// startHandler tells the observers that a handler starts with context ctx, lets
// every TraceHook wrap ctx, and returns the handler's context and what to call when
// it returns.
func startHandler(ctx context.Context, s Settings, source string, info *Info) (context.Context, func(error)) {
	hk := s.hooked()
	made := ctx // the context the execution was made with: the attempt's parent
	if ic, ok := ctx.(*itemCtx); ok {
		made = ic.plain()
	}
	e := HandlerEvent{Source: sourceOf(made, source), Scope: s.Scope, Key: info.Key, Attempt: info.Attempt, Fence: info.Fence,
		Origin: originOf(observe.MessageOf(made))}
	for _, h := range hk.handler {
		h.OnHandlerStart(e)
	}
	var ends []func(HandlerEvent)
	for _, h := range hk.trace {
		var end func(HandlerEvent)
		ctx, end = h.StartHandler(ctx, e)
		if end != nil {
			ends = append(ends, end)
		}
	}
	began := time.Now()
	return ctx, func(err error) {
		e.Duration, e.Err, e.Kind = time.Since(began), err, ErrorKind(err)
		if errors.Is(err, ErrAlreadyApplied) {
			e.Kind = ""
		}
		for i := len(ends) - 1; i >= 0; i-- {
			ends[i](e)
		}
		for _, h := range hk.handler {
			h.OnHandlerEnd(e)
		}
	}
}

// reportSettle tells the observers of one settle call.
func reportSettle(s Settings, n int, took time.Duration) {
	e := SettleEvent{Scope: s.Scope, Messages: n, Latency: took}
	for _, h := range s.hooked().settle {
		h.OnSettle(e)
	}
}
