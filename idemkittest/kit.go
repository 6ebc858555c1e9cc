package idemkittest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/typednil"
	"github.com/idemkit/idemkit/store/memory"
)

// Message is the message the scenarios deliver: the key and payload a handler
// would be given by ExecuteIdempotently or an adapter.
type Message struct {
	Key     consumer.Key
	Payload []byte
}

// Kit runs a handler through the scenarios. T is the handler's result type. A
// Kit runs one scenario at a time; make one per test.
type Kit[T any] struct {
	tb  testing.TB
	cfg config
	err error // from New: every run reports it
}

// New returns a kit that reports to tb. It fails tb at once when an option is
// missing or out of range (WithEffects is required). tb may be nil for a kit
// used only through Check, which reports everything in its Report.
func New[T any](tb testing.TB, opts ...Option) *Kit[T] {
	if tb != nil {
		tb.Helper()
	}
	k := &Kit[T]{tb: tb}
	for _, o := range opts {
		if o == nil {
			k.err = errors.New("New: nil option")
			break
		}
		o.apply(&k.cfg)
	}
	if k.err == nil {
		if err := k.cfg.validate(); err != nil {
			k.err = fmt.Errorf("New: %w", err)
		}
	}
	if k.err != nil && tb != nil {
		tb.Fatalf("idemkittest: %v", k.err)
	}
	return k
}

// RequireExactlyOnce runs every scenario on handler with msg and fails the test,
// once per failed scenario, with a message that names the scenario, the effect
// count it saw, why that happens and the fix. Warnings (the redelivery after the
// retention ran the handler again) and skipped scenarios are logged. It stops the
// test (FailNow) when the kit cannot run. It returns the report.
func (k *Kit[T]) RequireExactlyOnce(ctx context.Context, msg Message, handler func(ctx context.Context) (T, error)) Report {
	if k != nil && k.tb != nil {
		k.tb.Helper()
	}
	return k.Run(ctx, msg, handler)
}

// Run is RequireExactlyOnce for the scenarios named (every scenario when none
// is): kit.Run(ctx, msg, handler, idemkittest.CrashAfterEffect).
func (k *Kit[T]) Run(ctx context.Context, msg Message, handler func(ctx context.Context) (T, error), scenarios ...Scenario) Report {
	if k != nil && k.tb != nil {
		k.tb.Helper()
	}
	r := k.Check(ctx, msg, handler, scenarios...)
	if k == nil || k.tb == nil {
		return r
	}
	for _, v := range r.Verdicts {
		switch {
		case v.Failure != "":
			k.tb.Errorf("idemkittest: %s", v.Failure)
		case v.Warning != "":
			k.tb.Logf("idemkittest: warning: %s", v.Warning)
		case v.Skipped != "":
			k.tb.Logf("idemkittest: skipped: %s: %s", v.Scenario, v.Skipped)
		}
	}
	if r.Err != nil {
		k.tb.Fatalf("idemkittest: %v", r.Err)
	}
	return r
}

// Check runs the scenarios named (every scenario when none is) and returns what
// they found, failing no test: for tests that expect a handler to fail a
// scenario (a plain handler's effect runs twice after a crash after its effect,
// which is at-least-once by design), and for programs.
func (k *Kit[T]) Check(ctx context.Context, msg Message, handler func(ctx context.Context) (T, error), scenarios ...Scenario) Report {
	switch {
	case k == nil:
		return Report{Err: errors.New("nil Kit: make it with New")}
	case k.err != nil:
		return Report{Err: k.err}
	case ctx == nil:
		return Report{Err: errors.New("nil context: pass the test's context (t.Context() or context.Background())")}
	case handler == nil:
		return Report{Err: errors.New("nil handler: pass the function you give ExecuteIdempotently or an adapter")}
	}
	if err := msg.Key.Validate(); err != nil {
		return Report{Err: fmt.Errorf("message: %w", err)}
	}
	if len(scenarios) == 0 {
		scenarios = Scenarios()
	}
	for _, s := range scenarios {
		if !s.valid() {
			return Report{Err: fmt.Errorf("unknown %v: use the Scenario constants (Scenarios() lists them)", s)}
		}
	}
	run := newRunID()
	var rep Report
	for _, s := range scenarios {
		if err := ctx.Err(); err != nil {
			rep.Err = fmt.Errorf("stopped before %s: %w", s, err)
			return rep
		}
		env, err := k.newEnv(s, run)
		if err != nil {
			rep.Err = fmt.Errorf("%s: %w", s, err)
			return rep
		}
		if k.cfg.reset != nil {
			k.cfg.reset()
		}
		tr := &trial[T]{env: env, ctx: ctx, msg: msg, fn: handler, scenario: s, base: k.cfg.effects()}
		v := tr.run()
		v.Effects = k.cfg.effects() - tr.base
		tr.judge(&v)
		rep.Verdicts = append(rep.Verdicts, v)
		if tr.err != nil {
			rep.Err = fmt.Errorf("%s: %w", s, tr.err)
			return rep
		}
	}
	return rep
}

// env is one scenario's store: a FaultStore over a store with no record of the
// message, and the clock the kit may move.
type env struct {
	fs    *FaultStore
	inner consumer.Store
	clock *Clock // nil: the kit waits for the store's clock
	s     consumer.Settings
}

// newEnv makes scenario s's store.
func (k *Kit[T]) newEnv(s Scenario, run string) (*env, error) {
	scope := "idemkittest-" + run + "-" + abouts[s].slug
	e := &env{clock: k.cfg.clock}
	var err error
	if k.cfg.newStore == nil {
		e.clock = NewClock(time.Now())
		e.inner, err = memory.NewStore(consumer.WithScope(scope), consumer.WithLease(DefaultLease),
			consumer.WithLogger(slog.New(slog.DiscardHandler)), memory.WithClock(e.clock))
	} else {
		e.inner, err = k.cfg.newStore(scope)
		if err == nil && (e.inner == nil || typednil.Is(e.inner)) {
			err = errors.New("the WithStore function returned a nil store")
		}
	}
	if err != nil {
		return nil, fmt.Errorf("making the store: %w", err)
	}
	e.s = e.inner.Settings()
	switch {
	case e.s.Scope != scope:
		return nil, fmt.Errorf("the store's scope is %q, not the %q the kit gave: make it with consumer.WithScope(scope)", e.s.Scope, scope)
	case e.s.Locker != nil:
		return nil, errors.New("the store has WithLock: the scenarios run handlers under their claims only (a lock is a guard of its own, with its own tests in package lock); give the test's store no WithLock")
	case e.clock == nil && e.s.Lease > maxWait:
		return nil, fmt.Errorf("the store's lease is %v: on a store whose clock the kit does not move, it waits leases out; give the store consumer.WithLease(time.Second) in the test (at most %v), or a memory store with the kit's clock (WithClock)", e.s.Lease, maxWait)
	}
	e.fs, err = NewFaultStore(e.inner)
	return e, err
}

// newRunID names one run of the scenarios, in the scopes of its records.
func newRunID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
