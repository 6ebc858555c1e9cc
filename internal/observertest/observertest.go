// Package observertest drives an observer with every kind of event idemkit
// reports, carrying every label value those events can take, and checks the
// labels an observer made of them against the one vocabulary,
// telemetry.LabelValues. The tests of the metric and trace plugins
// (contrib/idemprom, contrib/idemotel) share it, so that both are held to the same
// events and the same spelling.
package observertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/observe"
	"github.com/idemkit/idemkit/internal/telemetry"
	"github.com/idemkit/idemkit/store/memory"
)

// Scope is the scope of every store EveryEvent uses.
const Scope = "orders"

// lease is short so that a takeover and a lost lease take little time.
const lease = 60 * time.Millisecond

// EveryEvent makes the observers obs see every kind of event, through real executions on
// memory stores (scope Scope) and, for what only adapters report, through the
// hooks as the adapters call them (internal/observe):
//
//   - executions of every source (execute, pipeline, kafka, amqp, http through
//     the HTTP middleware itself, replay) with every outcome and action, and the
//     error kinds permanent, conflict,
//     exhausted, lease_lost, store_unavailable, invalid_key, not_run, abandoned, interrupted,
//     panic and handler;
//   - one takeover of a record a crashed worker left started, whose handler
//     finds its effect already applied (the execution ends DUPLICATE);
//   - claims answered claimed, duplicate, in_progress, conflict and error; settle
//     calls; renewals, and one lost lease;
//   - retries, dead letters (with the upper-case kinds adapters write: PERMANENT,
//     NO_KEY, UNDECODABLE, and one body-less copy), commits (and one failed
//     commit), acknowledgements, and a topic paused and resumed.
func EveryEvent(t testing.TB, obs ...consumer.Observer) {
	t.Helper()
	ctx := context.Background()
	s := store(t, obs, consumer.WithMaxAttempts(2))
	executions(ctx, t, s)
	sources(ctx, t, s)
	HTTP(t, obs...)
	pipelines(ctx, t, s)
	Takeover(t, obs...)
	leaseLost(ctx, t, s)
	r := consumer.ExecuteIdempotently(ctx, &unreachable{s}, "down", nil, func(context.Context) (int, error) { return 1, nil })
	want(t, "store unreachable", r, consumer.Error, consumer.KindStoreUnavailable)
	adapterEvents(s.Settings())
}

// Takeover leaves the key "transfer-7" claimed by a worker that crashed before it
// settled, then runs it: the claim takes the record over once its lease ran out,
// and the handler finds its effect already applied (consumer.AlreadyApplied, as
// store/postgres's InTx says after such a crash), so the execution ends DUPLICATE.
// obs sees one takeover, one handler run without an error kind, and one outcome
// duplicate (after claims answered in_progress while the lease was live).
func Takeover(t testing.TB, obs ...consumer.Observer) {
	t.Helper()
	ctx := context.Background()
	s := store(t, obs, consumer.WithWaitInProgress(time.Minute))
	if rep := s.Begin(ctx, []consumer.Claim{{Key: "transfer-7", Owner: "crashed-worker"}}); !rep[0].Claimed() {
		t.Fatalf("observertest: claim: %v %v", rep[0].Status, rep[0].Err)
	}
	runs := 0
	r := consumer.ExecuteIdempotently(ctx, s, "transfer-7", nil, func(context.Context) (int, error) {
		runs++
		return 42, consumer.AlreadyApplied()
	})
	if r.Outcome != consumer.Duplicate || runs != 1 {
		t.Fatalf("observertest: takeover: %v %v after %d runs, want DUPLICATE after 1", r.Outcome, r.Err, runs)
	}
}

func store(t testing.TB, obs []consumer.Observer, opts ...consumer.Option) *memory.Store {
	t.Helper()
	s, err := memory.NewStore(append([]consumer.Option{consumer.WithScope(Scope), consumer.WithLease(lease),
		consumer.WithObserver(obs...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// executions runs ExecuteIdempotently and ExecuteBatch to every outcome.
func executions(ctx context.Context, t testing.TB, s consumer.Store) {
	ok := func(context.Context) (int, error) { return 1, nil }
	want(t, "success", consumer.ExecuteIdempotently(ctx, s, "e-ok", []byte("a"), ok), consumer.Success, "")
	want(t, "duplicate", consumer.ExecuteIdempotently(ctx, s, "e-ok", []byte("a"), ok), consumer.Duplicate, "")
	want(t, "conflict", consumer.ExecuteIdempotently(ctx, s, "e-ok", []byte("b"), ok), consumer.Error, consumer.KindConflict)
	var inner consumer.Result[int]
	consumer.ExecuteIdempotently(ctx, s, "e-busy", nil, func(hctx context.Context) (int, error) {
		inner = consumer.ExecuteIdempotently(hctx, s, "e-busy", nil, ok)
		return 1, nil
	})
	want(t, "in progress", inner, consumer.InProgress, "")
	fail := func(err error) func(context.Context) (int, error) {
		return func(context.Context) (int, error) { return 0, err }
	}
	want(t, "permanent", consumer.ExecuteIdempotently(ctx, s, "e-perm", nil, fail(consumer.Permanent(errors.New("declined")))),
		consumer.Error, consumer.KindPermanent)
	want(t, "duplicate of a failure", consumer.ExecuteIdempotently(ctx, s, "e-perm", nil, ok), consumer.Duplicate, consumer.KindPermanent)
	want(t, "retryable", consumer.ExecuteIdempotently(ctx, s, "e-flaky", nil, fail(errors.New("reset"))), consumer.Error, consumer.KindHandler)
	want(t, "exhausted", consumer.ExecuteIdempotently(ctx, s, "e-flaky", nil, fail(errors.New("reset"))), consumer.Error, consumer.KindExhausted)
	want(t, "abandoned", consumer.ExecuteIdempotently(ctx, s, "e-abandon", nil, fail(consumer.Abandon(errors.New("502")))),
		consumer.Error, consumer.KindAbandoned)
	want(t, "panic", consumer.ExecuteIdempotently(ctx, s, "e-panic", nil, func(context.Context) (int, error) { panic("boom") }),
		consumer.Error, consumer.KindPanic)
	want(t, "invalid key", consumer.ExecuteIdempotently(ctx, s, "", nil, ok), consumer.Error, consumer.KindInvalidKey)
	cctx, cancel := context.WithCancel(ctx)
	want(t, "interrupted", consumer.ExecuteIdempotently(cctx, s, "e-interrupted", nil, func(hctx context.Context) (int, error) {
		cancel() // the caller stops while the handler runs
		<-hctx.Done()
		return 0, hctx.Err()
	}), consumer.Error, consumer.KindInterrupted)
	rs := consumer.ExecuteBatch(ctx, s, []consumer.BatchItem{{Key: "b-0"}, {Key: "b-1"}},
		func(_ context.Context, i int, _ consumer.BatchItem) (int, error) {
			return 0, errors.New("first fails")
		}, consumer.WithStopAfterFailure(true), consumer.WithConcurrency(1))
	want(t, "not run", rs[1], consumer.Error, consumer.KindNotRun)
}

// sources runs, as the HTTP middleware and replay do (observe.WithSource), what
// they answer and what they reject.
func sources(ctx context.Context, t testing.TB, s consumer.Store) {
	ok := func(context.Context) (int, error) { return 1, nil }
	for _, src := range []string{consumer.SourceHTTP, consumer.SourceReplay} {
		sctx := observe.WithSource(ctx, src)
		key := consumer.Key(src + "-1")
		want(t, src, consumer.ExecuteIdempotently(sctx, s, key, []byte("a"), ok), consumer.Success, "")
		want(t, src+" conflict", consumer.ExecuteIdempotently(sctx, s, key, []byte("b"), ok), consumer.Error, consumer.KindConflict)
		want(t, src+" duplicate of a failure", consumer.ExecuteIdempotently(sctx, s, "e-perm", nil, ok), consumer.Duplicate, consumer.KindPermanent)
	}
}

// pipelines runs a message through a Pipeline of each pipeline source.
func pipelines(ctx context.Context, t testing.TB, s consumer.Store) {
	for _, src := range []string{consumer.SourcePipeline, consumer.SourceKafka, consumer.SourceAMQP} {
		var opts []consumer.PipelineOption
		if src != consumer.SourcePipeline {
			opts = append(opts, consumer.WithSource(src))
		}
		p, err := consumer.NewPipeline[int](ctx, s, opts...)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var got []consumer.Result[int]
		for _, k := range []string{"p-" + src, "e-ok"} {
			wg.Add(1)
			err := p.Submit(ctx, consumer.PipelineItem[int]{Key: consumer.Key(k), Payload: []byte("a"),
				Run: func(context.Context) (int, error) { return 1, nil },
				Done: func(r consumer.Result[int]) {
					mu.Lock()
					got = append(got, r)
					mu.Unlock()
					wg.Done()
				}})
			if err != nil {
				t.Fatal(err)
			}
		}
		wg.Wait()
		if err := p.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		sort.Slice(got, func(i, j int) bool { return got[i].Key > got[j].Key })
		want(t, src, got[0], consumer.Success, "")
		want(t, src+" duplicate", got[1], consumer.Duplicate, "")
	}
}

// leaseLost runs a handler whose lease cannot be renewed until it is lost.
func leaseLost(ctx context.Context, t testing.TB, s consumer.Store) {
	r := consumer.ExecuteIdempotently(ctx, &failingExtend{s}, "e-long", nil, func(hctx context.Context) (int, error) {
		<-hctx.Done()
		return 0, hctx.Err()
	})
	want(t, "lease lost", r, consumer.Error, consumer.KindLeaseLost)
}

// Origins of the adapter events adapterEvents reports.
var (
	kafkaOrigin = consumer.Origin{Topic: "orders", Partition: 0, Offset: 9}
	amqpOrigin  = consumer.Origin{Queue: "orders", DeliveryTag: 4}
)

// adapterEvents reports to the observers of s what the broker adapters report, as they do.
func adapterEvents(s consumer.Settings) {
	obs := s.Observers
	observe.Each(obs, func(h consumer.RetryHook) {
		h.OnRetry(consumer.RetryEvent{Source: consumer.SourceKafka, Scope: s.Scope, Key: "k", Origin: kafkaOrigin, Attempt: 1,
			Kind: consumer.ErrorKind(errors.New("reset")), Delay: time.Second})
		h.OnRetry(consumer.RetryEvent{Source: consumer.SourceAMQP, Scope: s.Scope, Key: "k", Origin: amqpOrigin, Attempt: 1,
			Kind: consumer.ErrorKind(&consumer.StoreError{Op: "begin", Err: errors.New("refused")}), Delay: time.Second,
			Destination: "orders.retry.1s"})
	})
	observe.Each(obs, func(h consumer.DeadLetterHook) {
		for _, kind := range []string{consumer.DeadLetterKind(consumer.Permanent(errors.New("declined"))),
			consumer.DeadLetterKind(&consumer.ExhaustedError{Attempts: 3}), "NO_KEY", "UNDECODABLE"} {
			h.OnDeadLetter(consumer.DeadLetterEvent{Source: consumer.SourceKafka, Scope: s.Scope, Key: "k", Origin: kafkaOrigin,
				Kind: kind, Err: errors.New("why"), Destination: "orders.dlq"})
		}
		h.OnDeadLetter(consumer.DeadLetterEvent{Source: consumer.SourceAMQP, Scope: s.Scope, Key: "k", Origin: amqpOrigin,
			BodyLess: true, Kind: consumer.DeadLetterKind(consumer.ErrPayloadConflict), Err: consumer.ErrPayloadConflict,
			Destination: "orders.dlq"})
	})
	observe.Each(obs, func(h consumer.CommitHook) {
		h.OnCommit(consumer.CommitEvent{Source: consumer.SourceKafka, Scope: s.Scope, Origin: kafkaOrigin, Lag: 3})
		// A failed commit: neither a commit nor a lag.
		h.OnCommit(consumer.CommitEvent{Source: consumer.SourceKafka, Scope: s.Scope,
			Origin: consumer.Origin{Topic: "orders", Partition: 0, Offset: 12}, Lag: -1, Err: errors.New("NOT_COORDINATOR")})
	})
	observe.Each(obs, func(h consumer.AckHook) {
		h.OnAck(consumer.AckEvent{Source: consumer.SourceAMQP, Scope: s.Scope, Origin: amqpOrigin, Messages: 2})
	})
	observe.Each(obs, func(h consumer.PauseHook) {
		e := consumer.PauseEvent{Source: consumer.SourceKafka, Scope: s.Scope, Origin: consumer.Origin{Topic: "orders"},
			Err: errors.New("dead-letter topic missing")}
		h.OnPause(e)
		e.Err = nil
		h.OnResume(e)
	})
}

func want(t testing.TB, what string, r consumer.Result[int], o consumer.Outcome, kind string) {
	t.Helper()
	if r.Outcome != o || consumer.ErrorKind(r.Err) != kind {
		t.Fatalf("observertest: %s: %v (%v), want %v with kind %q", what, r.Outcome, r.Err, o, kind)
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

// unreachable is a real store whose claims fail as if it could not be reached.
type unreachable struct{ consumer.Store }

func (u *unreachable) Begin(_ context.Context, claims []consumer.Claim) []consumer.ClaimReply {
	out := make([]consumer.ClaimReply, len(claims))
	for i := range out {
		out[i].Err = &consumer.StoreError{Op: "begin", Err: errors.New("connection refused")}
	}
	return out
}

// Labels checks the labels of an observer's series against telemetry.LabelValues
// and remembers which values it saw.
type Labels struct {
	t     testing.TB
	vocab map[string][]string
	seen  map[string]map[string]bool
}

// NewLabels returns a Labels that fails t.
func NewLabels(t testing.TB) *Labels {
	return &Labels{t: t, vocab: telemetry.LabelValues(), seen: map[string]map[string]bool{}}
}

// Check fails the test for every label of one series (named by where) that the
// vocabulary lists and whose value it does not.
func (l *Labels) Check(where string, labels map[string]string) {
	l.t.Helper()
	for name, v := range labels {
		values, ok := l.vocab[name]
		if !ok {
			continue
		}
		if !slices.Contains(values, v) {
			l.t.Errorf("%s: %s=%q is not in the vocabulary %v", where, name, v, values)
		}
		if l.seen[name] == nil {
			l.seen[name] = map[string]bool{}
		}
		l.seen[name][v] = true
	}
}

// Covers fails the test unless every vocabulary value of each named label was
// seen, except those given as name=value in except.
func (l *Labels) Covers(names []string, except ...string) {
	l.t.Helper()
	for _, name := range names {
		var missing []string
		for _, v := range l.vocab[name] {
			if !l.seen[name][v] && !slices.Contains(except, name+"="+v) {
				missing = append(missing, v)
			}
		}
		if len(missing) > 0 {
			l.t.Errorf("no series with %s=%s", name, strings.Join(missing, ", "))
		}
	}
}

// String lists the values seen, by label.
func (l *Labels) String() string { return fmt.Sprint(l.seen) }
