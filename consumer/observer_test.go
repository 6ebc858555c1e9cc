package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/observe"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/memory"
)

// tally is an observer of every core hook, counting what it is told.
type tally struct {
	mu                          sync.Mutex
	claims, claimed, duplicates int
	starts, ends                int
	settles, settled            int
	renewals, lost              int
	outcomes                    map[string]int // outcome/kind
}

var (
	_ consumer.ClaimHook   = (*tally)(nil)
	_ consumer.HandlerHook = (*tally)(nil)
	_ consumer.LeaseHook   = (*tally)(nil)
	_ consumer.SettleHook  = (*tally)(nil)
	_ consumer.OutcomeHook = (*tally)(nil)
)

func (t *tally) OnClaim(e consumer.ClaimEvent) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.claims++
	t.claimed += e.Claimed
	t.duplicates += e.Duplicates
}
func (t *tally) OnHandlerStart(consumer.HandlerEvent) { t.mu.Lock(); t.starts++; t.mu.Unlock() }
func (t *tally) OnHandlerEnd(consumer.HandlerEvent)   { t.mu.Lock(); t.ends++; t.mu.Unlock() }
func (t *tally) OnSettle(e consumer.SettleEvent) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.settles++
	t.settled += e.Messages
}
func (t *tally) OnLeaseRenewed(consumer.LeaseEvent) { t.mu.Lock(); t.renewals++; t.mu.Unlock() }
func (t *tally) OnLeaseLost(consumer.LeaseEvent)    { t.mu.Lock(); t.lost++; t.mu.Unlock() }
func (t *tally) OnOutcome(e consumer.OutcomeEvent) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.outcomes == nil {
		t.outcomes = map[string]int{}
	}
	t.outcomes[fmt.Sprintf("%s %v/%s", e.Source, e.Outcome, e.Kind)]++
}

// Observers see every claim call, handler, settle call and outcome, exactly.
func TestObserverCountsExactly(t *testing.T) {
	obs := &tally{}
	s := newRedisStore(t, testenv.Redis(t), consumer.WithObserver(obs))
	ctx := context.Background()
	items := make([]consumer.BatchItem, 10)
	for i := range items {
		items[i] = consumer.BatchItem{Key: consumer.Key(fmt.Sprint("o-", i))}
	}
	h := func(_ context.Context, i int, _ consumer.BatchItem) (int, error) {
		if i == 9 {
			return 0, consumer.Permanent(errors.New("declined"))
		}
		return i, nil
	}
	consumer.ExecuteBatch(ctx, s, items, h)
	consumer.ExecuteBatch(ctx, s, items[:5], h) // five duplicates

	p, err := consumer.NewPipeline[int](ctx, s, consumer.WithSource("replay"))
	if err != nil {
		t.Fatal(err)
	}
	res := newResults[int]()
	for i := 0; i < 3; i++ {
		_ = p.Submit(ctx, res.item(consumer.Key(fmt.Sprint("p-", i)), func(context.Context) (int, error) { return 1, nil }))
	}
	res.finish(ctx, t, p)
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.claimed != 13 || obs.duplicates != 5 || obs.starts != 13 || obs.ends != 13 || obs.settled != 13 {
		t.Fatalf("claimed %d, duplicates %d, handler starts %d ends %d, settled %d; want 13, 5, 13, 13, 13",
			obs.claimed, obs.duplicates, obs.starts, obs.ends, obs.settled)
	}
	want := map[string]int{
		"execute SUCCESS/":        9,
		"execute ERROR/permanent": 1,
		"execute DUPLICATE/":      5,
		"replay SUCCESS/":         3,
	}
	for k, n := range want {
		if obs.outcomes[k] != n {
			t.Fatalf("outcomes %v, want %v", obs.outcomes, want)
		}
	}
	if len(obs.outcomes) != len(want) {
		t.Fatalf("outcomes %v, want %v", obs.outcomes, want)
	}
}

// A lease that cannot be renewed is reported lost, once.
func TestObserverSeesLeaseLost(t *testing.T) {
	obs := &tally{}
	base := newRedisStore(t, testenv.Redis(t), consumer.WithLease(150*time.Millisecond), consumer.WithObserver(obs))
	s := &failingExtend{Store: base}
	r := consumer.ExecuteIdempotently(context.Background(), s, "renew-me", nil, func(ctx context.Context) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	})
	if !errors.Is(r.Err, consumer.ErrLeaseLost) {
		t.Fatalf("%v %v", r.Outcome, r.Err)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.lost != 1 || obs.renewals < 1 || obs.outcomes["execute ERROR/lease_lost"] != 1 {
		t.Fatalf("lost %d renewals %d outcomes %v", obs.lost, obs.renewals, obs.outcomes)
	}
}

// failingExtend is a real store whose renewals fail as if it were unreachable.
type failingExtend struct{ consumer.Store }

func (f *failingExtend) Extend(_ context.Context, items []consumer.Owned) []error {
	out := make([]error, len(items))
	for i := range out {
		out[i] = &consumer.StoreError{Op: "extend", Err: errors.New("connection refused")}
	}
	return out
}

func TestErrorKind(t *testing.T) {
	for err, want := range map[error]string{
		nil: "", consumer.Permanent(errors.New("x")): consumer.KindPermanent,
		consumer.ErrPayloadConflict: consumer.KindConflict, &consumer.ExhaustedError{Attempts: 3}: consumer.KindExhausted,
		&consumer.LeaseLostError{}: consumer.KindLeaseLost, &consumer.StoreError{Op: "begin", Err: errors.New("x")}: consumer.KindStoreUnavailable,
		consumer.Abandon(errors.New("502")): consumer.KindAbandoned, errors.New("boom"): consumer.KindHandler,
		&consumer.PanicError{Value: 1}: consumer.KindPanic,
	} {
		if got := consumer.ErrorKind(err); got != want {
			t.Errorf("ErrorKind(%v) = %q, want %q", err, got, want)
		}
	}
}

type traceKey struct{}

// tracer is a TraceHook that puts a span name in the handler's context.
type tracer struct {
	mu          sync.Mutex
	ended       []consumer.HandlerEvent
	fromCarrier []string
}

func (tr *tracer) StartHandler(ctx context.Context, e consumer.HandlerEvent) (context.Context, func(consumer.HandlerEvent)) {
	if c, ok := consumer.CarrierFromContext(ctx); ok {
		tr.mu.Lock()
		tr.fromCarrier = append(tr.fromCarrier, c.Get("traceparent"))
		tr.mu.Unlock()
	}
	return context.WithValue(ctx, traceKey{}, "span-"+string(e.Key)), func(end consumer.HandlerEvent) {
		tr.mu.Lock()
		tr.ended = append(tr.ended, end)
		tr.mu.Unlock()
	}
}

func (tr *tracer) Inject(ctx context.Context, set func(k, v string)) {
	if v, ok := ctx.Value(traceKey{}).(string); ok {
		set("traceparent", v)
	}
}

type headers map[string]string

func (h headers) Get(k string) string { return h[k] }
func (h headers) Keys() []string {
	var out []string
	for k := range h {
		out = append(out, k)
	}
	return out
}

// A TraceHook wraps the handler's context, sees the message's carrier, and can
// inject into produced copies; the handler's context still carries its Info and
// still accepts MarkCompleted. The message's origin, as an adapter gave it, is on
// the handler's and the outcome's events.
func TestTraceHookWrapsHandlers(t *testing.T) {
	tr := &tracer{}
	obs := &events{}
	s := must(memory.NewStore(consumer.WithObserver(tr, obs)))
	origin := consumer.Origin{Topic: "orders", Partition: 2, Offset: 7}
	ctx := observe.WithMessage(context.Background(), &observe.Message{Headers: headers{"traceparent": "00-abc-def-01"},
		Origin: observe.Origin(origin)})
	var injected headers = headers{}
	r := consumer.ExecuteIdempotently(ctx, s, "traced", nil, func(hctx context.Context) (string, error) {
		if hctx.Value(traceKey{}) != "span-traced" {
			return "", errors.New("the handler's context lacks the span")
		}
		if info, ok := consumer.InfoFromContext(hctx); !ok || info.Key != "traced" {
			return "", errors.New("the handler's context lost its Info")
		}
		observe.Each(s.Settings().Observers, func(h consumer.TraceHook) { h.Inject(hctx, func(k, v string) { injected[k] = v }) })
		return "ok", errors.New("boom")
	})
	if r.Outcome != consumer.Error {
		t.Fatalf("%v %v", r.Outcome, r.Err)
	}
	if len(tr.ended) != 1 || tr.ended[0].Kind != consumer.KindHandler || len(tr.fromCarrier) != 1 ||
		tr.fromCarrier[0] != "00-abc-def-01" || injected["traceparent"] != "span-traced" {
		t.Fatalf("ended %+v, carrier %v, injected %v", tr.ended, tr.fromCarrier, injected)
	}
	if len(obs.ends) != 1 || obs.ends[0].Origin != origin || len(obs.outcomes) != 1 || obs.outcomes[0].Origin != origin ||
		obs.outcomes[0].Carrier.Get("traceparent") != "00-abc-def-01" {
		t.Fatalf("handler ends %+v, outcomes %+v; want one each from %+v with its headers", obs.ends, obs.outcomes, origin)
	}
}
