package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idemamqp "github.com/idemkit/idemkit/adapters/amqp"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
)

// counters observes a worker's store: the deliveries' outcomes, the retries, the
// dead letters (and keeps them), the lost sessions (reconnects) and the resumes.
type counters struct {
	outcomes   [5]atomic.Int64
	retries    atomic.Int64
	dead       atomic.Int64
	reconnects atomic.Int64
	resumes    atomic.Int64
	onPause    func() // called in OnPause, when set before the worker starts

	mu          sync.Mutex
	deadLetters []consumer.DeadLetterEvent
}

func (c *counters) OnOutcome(e consumer.OutcomeEvent) { c.outcomes[e.Outcome].Add(1) }
func (c *counters) OnRetry(consumer.RetryEvent)       { c.retries.Add(1) }
func (c *counters) OnPause(consumer.PauseEvent) {
	c.reconnects.Add(1)
	if c.onPause != nil {
		c.onPause()
	}
}
func (c *counters) OnResume(consumer.PauseEvent) { c.resumes.Add(1) }

func (c *counters) OnDeadLetter(e consumer.DeadLetterEvent) {
	c.mu.Lock()
	c.deadLetters = append(c.deadLetters, e)
	c.mu.Unlock()
	c.dead.Add(1)
}

func checkExactlyOnce(t *testing.T, book *testenv.Ledger, orders []order) {
	t.Helper()
	counts, stale := book.Counts(t)
	if len(counts) != len(orders) {
		t.Errorf("%d orders fulfilled, want %d", len(counts), len(orders))
	}
	for _, o := range orders {
		if counts[o.ID] != 1 {
			t.Errorf("order %s fulfilled %d times, want 1", o.ID, counts[o.ID])
		}
	}
	if stale != 0 {
		t.Errorf("%d stale writes", stale)
	}
}

// 10,000 orders, a fifth published twice, 4 workers with prefetch 50: every order
// fulfilled exactly once, the queue and the dead-letter queue empty at the end.
func TestExactlyOnceWithDuplicates(t *testing.T) {
	url := testenv.AMQP(t)
	hooks := &counters{}
	store, book, _ := newStore(t, consumer.WithObserver(hooks))
	topo := topology(t, url, false)
	orders := publish(t, url, topo.Queue, 10000, 0.2)
	for i := 0; i < 4; i++ {
		w, err := idemamqp.NewTypedWorker(store, url, topo, decodeOrder, fulfil(book),
			idemamqp.WithPrefetch(50), idemamqp.WithConcurrency(4))
		if err != nil {
			t.Fatal(err)
		}
		start(t, w)
	}
	testenv.Eventually(t, 120*time.Second, "every delivery settled", func() bool {
		return hooks.outcomes[consumer.Success].Load()+hooks.outcomes[consumer.Duplicate].Load() >= 12000
	})
	checkExactlyOnce(t, book, orders)
	if q, d := depth(t, url, topo.Queue), depth(t, url, topo.DeadLetterQueue); q != 0 || d != 0 {
		t.Fatalf("queue depth %d, dead-letter depth %d; want 0 and 0", q, d)
	}
	if s := hooks.outcomes[consumer.Success].Load(); s != 10000 {
		t.Fatalf("%d SUCCESS, want 10000", s)
	}
}

// The broker force-closes every worker's connection twice mid-run: the workers
// reconnect and nothing is lost or done twice.
func TestForcedConnectionCloses(t *testing.T) {
	url := testenv.AMQP(t)
	if !haveRabbitmqctl() {
		t.Skip("needs rabbitmqctl on the broker's machine")
	}
	hooks := &counters{}
	store, book, _ := newStore(t, consumer.WithObserver(hooks))
	topo := topology(t, url, false)
	orders := publish(t, url, topo.Queue, 4000, 0.2)
	slow := func(ctx context.Context, o order, d amqp091.Delivery) (string, error) {
		time.Sleep(200 * time.Microsecond)
		return fulfil(book)(ctx, o, d)
	}
	name := fmt.Sprintf("idemkit-test-%04x", rand.N(1<<16)) // only these workers' connections are closed
	for i := 0; i < 4; i++ {
		w, err := idemamqp.NewTypedWorker(store, url, topo, decodeOrder, slow, idemamqp.WithPrefetch(50), idemamqp.WithName(name),
			idemamqp.WithReconnectBackoff(50*time.Millisecond, 500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		start(t, w)
	}
	for round := 1; round <= 2; round++ {
		testenv.Eventually(t, 60*time.Second, "progress before the forced close", func() bool { return book.Total(t) >= round*1200 })
		closeConnectionsNamed(t, name)
		testenv.Eventually(t, 30*time.Second, "the workers to reconnect", func() bool { return hooks.reconnects.Load() >= int64(4*round) })
	}
	testenv.Eventually(t, 120*time.Second, "every order fulfilled", func() bool { return book.Total(t) >= 4000 })
	testenv.Eventually(t, 60*time.Second, "the queue to drain", func() bool { return depth(t, url, topo.Queue) == 0 })
	time.Sleep(300 * time.Millisecond) // the last retries' delays
	checkExactlyOnce(t, book, orders)
	if d := depth(t, url, topo.DeadLetterQueue); d != 0 {
		t.Fatalf("%d dead-lettered, want 0", d)
	}
	t.Logf("%d reconnects, %d SUCCESS, %d DUPLICATE, %d retries", hooks.reconnects.Load(),
		hooks.outcomes[consumer.Success].Load(), hooks.outcomes[consumer.Duplicate].Load(), hooks.retries.Load())
}

// A poison message is dead-lettered after exactly max attempts, with headers giving
// the reason, the attempts and the original routing; it went through the delayed
// retry queue in between, never an immediate requeue.
func TestPoisonDeadLetteredAfterMaxAttempts(t *testing.T) {
	url := testenv.AMQP(t)
	hooks := &counters{}
	store, book, _ := newStore(t, consumer.WithMaxAttempts(3), consumer.WithObserver(hooks))
	topo := topology(t, url, true) // quorum queues
	var poisonRuns atomic.Int32
	var deliveries []time.Time
	handler := func(ctx context.Context, o order, d amqp091.Delivery) (string, error) {
		if o.ID == "poison" {
			poisonRuns.Add(1)
			deliveries = append(deliveries, time.Now())
			return "", errors.New("warehouse API timed out")
		}
		return fulfil(book)(ctx, o, d)
	}
	w, err := idemamqp.NewTypedWorker(store, url, topo, decodeOrder, handler, idemamqp.WithConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	publishRaw(t, url, topo.Queue,
		amqp091.Publishing{MessageId: "poison", Body: []byte(`{"id":"poison","items":1}`)},
		amqp091.Publishing{MessageId: "fine", Body: []byte(`{"id":"fine","items":1}`)})
	start(t, w)
	testenv.Eventually(t, 30*time.Second, "the poison message dead-lettered", func() bool { return hooks.dead.Load() == 1 })
	if poisonRuns.Load() != 3 || hooks.retries.Load() != 2 {
		t.Fatalf("poison ran %d times with %d retries; want 3 and 2", poisonRuns.Load(), hooks.retries.Load())
	}
	for i := 1; i < len(deliveries); i++ {
		if gap := deliveries[i].Sub(deliveries[i-1]); gap < 90*time.Millisecond {
			t.Fatalf("retry %d came after %v: not delayed", i, gap)
		}
	}
	dead := drain(t, url, topo.DeadLetterQueue)
	if len(dead) != 1 {
		t.Fatalf("%d dead letters", len(dead))
	}
	h := dead[0].Headers
	if h[idemamqp.HeaderAttempts] != int32(3) || h[idemamqp.HeaderOutcome] != "ERROR" || h[idemamqp.HeaderKey] != "poison" ||
		h[idemamqp.HeaderOriginalQueue] != topo.Queue || h[idemamqp.HeaderOriginalRouting] != topo.Queue ||
		!strings.Contains(h[idemamqp.HeaderReason].(string), "warehouse API timed out") ||
		!strings.Contains(h[idemamqp.HeaderReason].(string), "attempts exhausted") {
		t.Fatalf("dead-letter headers %v", h)
	}
	if string(dead[0].Body) != `{"id":"poison","items":1}` || dead[0].MessageId != "poison" {
		t.Fatalf("dead letter body %q id %q", dead[0].Body, dead[0].MessageId)
	}
	if counts, _ := book.Counts(t); counts["fine"] != 1 {
		t.Fatalf("the good message was fulfilled %d times", counts["fine"])
	}
}

// A delivery whose key another worker holds goes to the delayed-retry queue for
// at least the lease left, and on its next delivery takes over the dead claim:
// exactly two deliveries.
func TestInProgressCollisionRetriesAfterDelay(t *testing.T) {
	url := testenv.AMQP(t)
	hooks := &counters{}
	var deliveries atomic.Int32
	store, book, _ := newStore(t, consumer.WithLease(500*time.Millisecond),
		consumer.WithObserver(hooks, deliveryCounter{&deliveries}))
	topo := topology(t, url, false)
	if rep := store.Begin(context.Background(), []consumer.Claim{{Key: "held", Owner: "crashed-worker"}})[0]; !rep.Claimed() {
		t.Fatalf("claim: %+v", rep)
	}
	handler := func(ctx context.Context, o order, d amqp091.Delivery) (string, error) {
		return fulfil(book)(ctx, o, d)
	}
	w, err := idemamqp.NewTypedWorker(store, url, topo, decodeOrder, handler)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	publishRaw(t, url, topo.Queue, amqp091.Publishing{MessageId: "held", Body: []byte(`{"id":"held","items":1}`)})
	start(t, w)
	testenv.Eventually(t, 10*time.Second, "the held order fulfilled", func() bool { return hooks.outcomes[consumer.Success].Load() == 1 })
	if took := time.Since(began); took < 500*time.Millisecond {
		t.Fatalf("fulfilled after %v, before the other claim's lease ran out", took)
	}
	time.Sleep(time.Second) // nothing else may arrive
	if n := deliveries.Load(); n != 2 {
		t.Fatalf("%d deliveries, want exactly 2 (in progress, then taken over)", n)
	}
	if hooks.outcomes[consumer.InProgress].Load() != 1 || hooks.retries.Load() != 1 {
		t.Fatalf("%d IN_PROGRESS, %d retries; want 1 and 1", hooks.outcomes[consumer.InProgress].Load(), hooks.retries.Load())
	}
}

// deliveryCounter counts the deliveries executed (one outcome each).
type deliveryCounter struct{ n *atomic.Int32 }

func (c deliveryCounter) OnOutcome(consumer.OutcomeEvent) { c.n.Add(1) }

// Missing keys, undecodable bodies and a closed store: dead-letters or delayed
// retries with a bounded number of deliveries, never a panic or a hot loop.
func TestBadInput(t *testing.T) {
	url := testenv.AMQP(t)
	hooks := &counters{}
	store, book, _ := newStore(t, consumer.WithObserver(hooks))
	topo := topology(t, url, false)
	w, err := idemamqp.NewTypedWorker(store, url, topo, decodeOrder, fulfil(book))
	if err != nil {
		t.Fatal(err)
	}
	publishRaw(t, url, topo.Queue,
		amqp091.Publishing{Body: []byte(`{"id":"no-message-id","items":1}`)},
		amqp091.Publishing{MessageId: "garbled", Body: []byte(`{not json`)},
		amqp091.Publishing{MessageId: "ok", Body: []byte(`{"id":"ok","items":1}`)})
	r := start(t, w)
	testenv.Eventually(t, 10*time.Second, "two dead letters", func() bool { return hooks.dead.Load() == 2 })
	testenv.Eventually(t, 10*time.Second, "the good order", func() bool { return hooks.outcomes[consumer.Success].Load() == 1 })
	r.stop()
	reasons := map[string]string{}
	for _, d := range drain(t, url, topo.DeadLetterQueue) {
		reasons[d.Headers[idemamqp.HeaderKind].(string)] = d.Headers[idemamqp.HeaderReason].(string)
	}
	if !strings.Contains(reasons["NO_KEY"], "empty key") || !strings.Contains(reasons["UNDECODABLE"], "undecodable") {
		t.Fatalf("dead-letter reasons %v", reasons)
	}
	// The observers were told of both, with the delivery's queue and tag and the reason.
	why := map[string]string{"NO_KEY": "empty key", "UNDECODABLE": "undecodable"}
	hooks.mu.Lock()
	for _, e := range hooks.deadLetters {
		w, ok := why[e.Kind]
		if !ok || e.Source != consumer.SourceAMQP || e.Queue != topo.Queue || e.DeliveryTag == 0 ||
			e.Destination != topo.DeadLetterQueue || e.Err == nil || !strings.Contains(e.Err.Error(), w) {
			t.Errorf("dead-letter event %+v, want one of the queue's deliveries with its reason", e)
		}
		delete(why, e.Kind)
	}
	hooks.mu.Unlock()

	// A store whose Redis client is closed: the handler never runs, and the
	// delivery is not an attempt: it cycles through the longest retry delay, never
	// dead-lettered, for as long as the store is down.
	deadRedis := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	_ = deadRedis.Close()
	hooks2 := &counters{}
	closed, err := redisstore.NewStore(deadRedis, consumer.WithMaxAttempts(4), consumer.WithScope("orders"),
		consumer.WithObserver(hooks2))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	w2, err := idemamqp.NewTypedWorker(closed, url, topo, decodeOrder,
		func(ctx context.Context, o order, d amqp091.Delivery) (string, error) { runs.Add(1); return "", nil })
	if err != nil {
		t.Fatal(err)
	}
	publishRaw(t, url, topo.Queue, amqp091.Publishing{MessageId: "store-down", Body: []byte(`{"id":"store-down","items":1}`)})
	r2 := start(t, w2)
	testenv.Eventually(t, 20*time.Second, "the delivery to cycle through the retry queue 6 times", func() bool { return hooks2.retries.Load() >= 6 })
	r2.stop()
	if runs.Load() != 0 || hooks2.dead.Load() != 0 {
		t.Fatalf("closed store: %d runs, %d dead letters; want 0 (fail closed) and 0 (an outage is not an attempt)",
			runs.Load(), hooks2.dead.Load())
	}
}

func TestTopologyConflict(t *testing.T) {
	url := testenv.AMQP(t)
	classic := topology(t, url, false)
	quorum := classic
	quorum.Quorum = true
	err := quorum.Declare(dial(t, url))
	var conflict *idemamqp.TopologyConflictError
	if !errors.As(err, &conflict) || conflict.Queue != classic.Queue ||
		(conflict.Argument != "x-queue-type" && conflict.Argument != "x-dead-letter-exchange") {
		t.Fatalf("declare over a classic queue as quorum: %v", err)
	}
	// The worker refuses to run on it, and says why.
	store, _, _ := newStore(t)
	w, err := idemamqp.NewWorker(store, url, quorum, func(ctx context.Context, d amqp091.Delivery) (int, error) { return 0, nil })
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(context.Background()); !errors.As(err, &conflict) {
		t.Fatalf("Run on a conflicting topology: %v", err)
	}
	// Declaring the same topology again is fine.
	if err := classic.Declare(dial(t, url)); err != nil {
		t.Fatalf("declare again: %v", err)
	}
}

// A store left on the default scope is refused: two services whose queues are
// bound to one fanout exchange would share its records, and the second would take
// every message the first handled for a DUPLICATE and never run it.
func TestDefaultScopeRefused(t *testing.T) {
	onDefault, err := redisstore.NewStore(testenv.Redis(t), consumer.WithPrefix(testenv.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	h := func(ctx context.Context, d amqp091.Delivery) (int, error) { return 0, nil }
	w, err := idemamqp.NewWorker(onDefault, testenv.LocalAMQPURL, idemamqp.Topology{Queue: "q"}, h)
	if w != nil || !errors.Is(err, idemamqp.ErrConfig) || !errors.Is(err, consumer.ErrDefaultScope) ||
		!strings.Contains(err.Error(), "consumer.WithScope") {
		t.Fatalf("worker on the default scope: %v, %v; want ErrConfig matching consumer.ErrDefaultScope naming WithScope", w, err)
	}
}

func TestInvalidConfiguration(t *testing.T) {
	store, _, _ := newStore(t)
	h := func(ctx context.Context, d amqp091.Delivery) (int, error) { return 0, nil }
	topo := idemamqp.Topology{Queue: "q"}
	for _, tc := range []struct {
		name  string
		store consumer.Store
		url   string
		topo  idemamqp.Topology
		opts  []idemamqp.Option
		hint  string
	}{
		{"nil store", nil, testenv.LocalAMQPURL, topo, nil, "nil store"},
		{"empty url", store, "", topo, nil, "URL"},
		{"bad url", store, "http://x", topo, nil, "URL"},
		{"no queue", store, testenv.LocalAMQPURL, idemamqp.Topology{}, nil, "Topology.Queue"},
		{"dlq is queue", store, testenv.LocalAMQPURL, idemamqp.Topology{Queue: "q", DeadLetterQueue: "q"}, nil, "DeadLetterQueue"},
		{"bad delay", store, testenv.LocalAMQPURL, idemamqp.Topology{Queue: "q", RetryDelays: []time.Duration{time.Microsecond}}, nil, "retry delay"},
		{"prefetch", store, testenv.LocalAMQPURL, topo, []idemamqp.Option{idemamqp.WithPrefetch(0)}, "WithPrefetch"},
		{"heartbeat under a second", store, testenv.LocalAMQPURL, topo, []idemamqp.Option{idemamqp.WithHeartbeat(500 * time.Millisecond)}, "WithHeartbeat"},
		{"heartbeat not whole seconds", store, testenv.LocalAMQPURL, topo, []idemamqp.Option{idemamqp.WithHeartbeat(1500 * time.Millisecond)}, "whole seconds"},
		{"heartbeat past AMQP's field", store, testenv.LocalAMQPURL, topo, []idemamqp.Option{idemamqp.WithHeartbeat(24 * time.Hour)}, "WithHeartbeat"},
		{"concurrency", store, testenv.LocalAMQPURL, topo, []idemamqp.Option{idemamqp.WithPrefetch(2), idemamqp.WithConcurrency(5)}, "WithConcurrency"},
		{"value key", store, testenv.LocalAMQPURL, topo, []idemamqp.Option{idemamqp.WithValueKey(func(o order) (consumer.Key, error) { return "", nil })}, "WithValueKey"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := idemamqp.NewWorker(tc.store, tc.url, tc.topo, h, tc.opts...)
			if !errors.Is(err, idemamqp.ErrConfig) || !strings.Contains(err.Error(), tc.hint) {
				t.Fatalf("err = %v, want ErrConfig mentioning %q", err, tc.hint)
			}
		})
	}
}
