package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
)

// The same scenario through every engine: ExecuteBatch (completions at the end of
// the batch, and per message) and a Pipeline (what the Kafka and RabbitMQ adapters
// run on). Each engine gets keys of its own on the same store.

// engineHandler is a scenario's handler for message i.
type engineHandler func(ctx context.Context, i int) (int, error)

// engineRunner runs messages with keys through one engine, under the caller's
// context ctx, and returns their results in order.
type engineRunner struct {
	name string
	run  func(t *testing.T, ctx context.Context, s consumer.Store, keys []consumer.Key, fn engineHandler) []consumer.Result[int]
}

var engineRunners = []engineRunner{
	{"ExecuteBatch", func(t *testing.T, ctx context.Context, s consumer.Store, keys []consumer.Key, fn engineHandler) []consumer.Result[int] {
		return consumer.ExecuteBatch(ctx, s, batchOf(keys), func(ctx context.Context, i int, _ consumer.BatchItem) (int, error) {
			return fn(ctx, i)
		})
	}},
	{"ExecuteBatch-per-message", func(t *testing.T, ctx context.Context, s consumer.Store, keys []consumer.Key, fn engineHandler) []consumer.Result[int] {
		return consumer.ExecuteBatch(ctx, s, batchOf(keys), func(ctx context.Context, i int, _ consumer.BatchItem) (int, error) {
			return fn(ctx, i)
		}, consumer.WithPerMessageCompletion(true))
	}},
	{"Pipeline", runThroughPipeline},
}

func batchOf(keys []consumer.Key) []consumer.BatchItem {
	items := make([]consumer.BatchItem, len(keys))
	for i, k := range keys {
		items[i] = consumer.BatchItem{Key: k, Payload: []byte(k)}
	}
	return items
}

// runThroughPipeline submits every message to a pipeline with one handler
// worker (handlers run one after another, as ExecuteBatch's do by default), waits
// for every answer and shuts the pipeline down. No handler body runs before every
// message is submitted, so a handler may cancel ctx.
func runThroughPipeline(t *testing.T, ctx context.Context, s consumer.Store, keys []consumer.Key, fn engineHandler) []consumer.Result[int] {
	t.Helper()
	p, err := consumer.NewPipeline[int](context.Background(), s, consumer.WithConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	out := make([]consumer.Result[int], len(keys))
	var answered sync.WaitGroup
	allIn := make(chan struct{})
	for i, k := range keys {
		answered.Add(1)
		err := p.Submit(ctx, consumer.PipelineItem[int]{Key: k, Payload: []byte(k),
			Run: func(hctx context.Context) (int, error) {
				<-allIn
				return fn(hctx, i)
			},
			Done: func(r consumer.Result[int]) { out[i] = r; answered.Done() },
		})
		if err != nil {
			t.Fatalf("submit %s: %v", k, err)
		}
	}
	close(allIn)
	answered.Wait()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	return out
}

// keysFor names n keys of test t for one engine, unique in the process (observers
// outlive a store).
func keysFor(t *testing.T, eng engineRunner, n int) []consumer.Key {
	keys := make([]consumer.Key, n)
	for i := range keys {
		keys[i] = consumer.Key(fmt.Sprintf("%s/%s-%d", t.Name(), eng.name, i))
	}
	return keys
}

// summary is what a user sees of a result: its outcome, the sentinels its error
// matches, and the attempt and fence it ran as.
type summary struct {
	Outcome consumer.Outcome
	Value   int
	Matches string
	Action  consumer.Action
	Attempt int
	Fence   int64
}

func (s summary) String() string {
	return fmt.Sprintf("%v value %d [%s] %v attempt %d fence %d", s.Outcome, s.Value, s.Matches, s.Action, s.Attempt, s.Fence)
}

var sentinels = []struct {
	name string
	err  error
}{
	{"not-run", consumer.ErrNotRun},
	{"interrupted", consumer.ErrInterrupted},
	{"lease-lost", consumer.ErrLeaseLost},
	{"store-unavailable", consumer.ErrStoreUnavailable},
	{"panic", consumer.ErrHandlerPanic},
	{"abandoned", consumer.ErrAbandoned},
	{"exhausted", consumer.ErrAttemptsExhausted},
	{"pipeline-stopped", consumer.ErrPipelineStopped},
	{"canceled", context.Canceled},
	{"declined", errDeclined},
}

var errDeclined = errors.New("card declined")

func summarize(r consumer.Result[int]) summary {
	var m []string
	for _, s := range sentinels {
		if errors.Is(r.Err, s.err) {
			m = append(m, s.name)
		}
	}
	if r.Err != nil && consumer.NotAnAttempt(r.Err) {
		m = append(m, "not-an-attempt")
	}
	return summary{Outcome: r.Outcome, Value: r.Value, Matches: strings.Join(m, " "), Action: r.Action(),
		Attempt: r.Attempt, Fence: r.Fence}
}

// wantSummaries fails unless every result of engine eng is the one wanted.
func wantSummaries(t *testing.T, eng engineRunner, rs []consumer.Result[int], want ...summary) {
	t.Helper()
	if len(rs) != len(want) {
		t.Fatalf("%s: %d results, want %d", eng.name, len(rs), len(want))
	}
	for i, r := range rs {
		if got := summarize(r); got != want[i] {
			t.Errorf("%s: message %d: %v (%v), want %v", eng.name, i, got, r.Err, want[i])
		}
	}
}

// counter counts calls per engine run (keys end with the message's index).
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

// add counts a call for key's engine and returns that engine's count.
func (c *counter) add(key consumer.Key) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[engineOf(key)]++
	return c.n[engineOf(key)]
}

// of is the count of the run key belongs to.
func (c *counter) of(key consumer.Key) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[engineOf(key)]
}

func engineOf(key consumer.Key) string {
	k := string(key)
	return k[:strings.LastIndexByte(k, '-')]
}

// failFirstSettle answers the first Settle call of each engine as an unreachable
// store would, without applying it, and calls during (with a key of the call)
// first.
type failFirstSettle struct {
	consumer.Store
	calls  counter
	during func(consumer.Key)
}

func (f *failFirstSettle) Settle(ctx context.Context, sts []consumer.Settlement) []consumer.SettleReply {
	if f.calls.add(sts[0].Key) == 1 {
		f.during(sts[0].Key)
		reps := make([]consumer.SettleReply, len(sts))
		for i := range reps {
			reps[i].Err = &consumer.StoreError{Op: "settle", Err: errors.New("connection reset by peer")}
		}
		return reps
	}
	return f.Store.Settle(ctx, sts)
}

// slowRelease takes delay to release claims; a call whose context ends first
// releases nothing.
type slowRelease struct {
	consumer.Store
	delay   time.Duration
	applied counter
}

func (s *slowRelease) Release(ctx context.Context, items []consumer.Owned) []error {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
	}
	if err := ctx.Err(); err != nil {
		errs := make([]error, len(items))
		for i := range errs {
			errs[i] = &consumer.StoreError{Op: "release", Err: err}
		}
		return errs
	}
	for _, it := range items {
		s.applied.add(it.Key)
	}
	return s.Store.Release(ctx, items)
}

// refuseRenewals refuses every renewal (another owner took the claim over, as
// far as the caller can tell), and holds every mark of a taken-over claim
// (Claim.Start) until its lease is lost, when holdMarks is set.
type refuseRenewals struct {
	consumer.Store
	lost      *lostLeases
	holdMarks bool
}

func (r *refuseRenewals) Extend(_ context.Context, items []consumer.Owned) []error {
	errs := make([]error, len(items))
	for i, it := range items {
		errs[i] = &consumer.LeaseLostError{Key: it.Key, Fence: it.Fence, Reason: "renewal refused by the test"}
	}
	return errs
}

func (r *refuseRenewals) Begin(ctx context.Context, claims []consumer.Claim) []consumer.ClaimReply {
	for _, c := range claims {
		if c.Start && r.holdMarks {
			r.lost.wait(c.Key)
		}
	}
	return r.Store.Begin(ctx, claims)
}

// lostLeases is an observer that tells which keys' leases were lost.
type lostLeases struct {
	mu   sync.Mutex
	lost map[consumer.Key]chan struct{}
}

var _ consumer.LeaseHook = (*lostLeases)(nil)

func (l *lostLeases) ch(key consumer.Key) chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost == nil {
		l.lost = map[consumer.Key]chan struct{}{}
	}
	c, ok := l.lost[key]
	if !ok {
		c = make(chan struct{})
		l.lost[key] = c
	}
	return c
}

func (l *lostLeases) OnLeaseRenewed(consumer.LeaseEvent) {}
func (l *lostLeases) OnLeaseLost(e consumer.LeaseEvent) {
	c := l.ch(e.Key)
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-c:
	default:
		close(c)
	}
}

// wait returns once key's lease was lost, or after a minute.
func (l *lostLeases) wait(key consumer.Key) {
	select {
	case <-l.ch(key):
	case <-time.After(time.Minute):
	}
}

// panickyHooks is an observer whose handler hooks panic while armed.
type panickyHooks struct{ atStart, atEnd atomic.Bool }

var _ consumer.HandlerHook = (*panickyHooks)(nil)

func (h *panickyHooks) OnHandlerStart(consumer.HandlerEvent) {
	if h.atStart.Load() {
		panic("the start hook is broken")
	}
}

func (h *panickyHooks) OnHandlerEnd(consumer.HandlerEvent) {
	if h.atEnd.Load() {
		panic("the end hook is broken")
	}
}
