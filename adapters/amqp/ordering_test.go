package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idemamqp "github.com/idemkit/idemkit/adapters/amqp"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

const (
	orderKeys   = 40
	perKey      = 25
	orderHeader = "account"
)

// ordered records what an ordered worker's handler did: the sequence numbers each
// key ran, in run order; the runs of each message; the runs of a redelivery.
type ordered struct {
	mu          sync.Mutex
	seqs        map[string][]int
	runs        map[string]int
	running     map[string]bool
	overlaps    int // a key's handler started while one of that key ran
	redelivered int
	total       atomic.Int64
}

func newOrdered() *ordered {
	return &ordered{seqs: map[string][]int{}, runs: map[string]int{}, running: map[string]bool{}}
}

// begin and end bracket one handler run of message id (key, seq).
func (o *ordered) begin(d amqp091.Delivery) (key string, seq int) {
	key, _ = d.Headers[orderHeader].(string)
	_, _ = fmt.Sscanf(strings.TrimPrefix(d.MessageId, key+"/"), "%d", &seq)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.running[key] {
		o.overlaps++
	}
	o.running[key] = true
	o.seqs[key] = append(o.seqs[key], seq)
	o.runs[d.MessageId]++
	if d.Redelivered {
		o.redelivered++
	}
	return key, seq
}

func (o *ordered) end(key string) {
	o.mu.Lock()
	o.running[key] = false
	o.mu.Unlock()
	o.total.Add(1)
}

// ranOf is how many messages of key ran.
func (o *ordered) ranOf(key string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.seqs[key])
}

// check asserts that every message ran exactly once, each key in publish order,
// never two of one key at once.
func (o *ordered) check(t *testing.T) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.overlaps != 0 {
		t.Errorf("%d runs started while a run of the same key was under way", o.overlaps)
	}
	for k := 0; k < orderKeys; k++ {
		key := keyName(k)
		seqs := o.seqs[key]
		if len(seqs) != perKey {
			t.Errorf("key %s ran %d messages, want %d: %v", key, len(seqs), perKey, seqs)
			continue
		}
		for i, s := range seqs {
			if s != i {
				t.Errorf("key %s ran in the order %v, want 0..%d", key, seqs, perKey-1)
				break
			}
		}
	}
	if len(o.runs) != orderKeys*perKey {
		t.Errorf("%d distinct messages ran, want %d", len(o.runs), orderKeys*perKey)
	}
	for id, n := range o.runs {
		if n != 1 {
			t.Errorf("message %s ran %d times, want 1", id, n)
		}
	}
}

func keyName(k int) string { return fmt.Sprintf("acct-%02d", k) }

// publishOrdered publishes perKey messages for each of orderKeys keys, the keys
// interleaved (message i is key i%orderKeys's number i/orderKeys), each with the
// key in a header and <key>/<seq> as its MessageId.
func publishOrdered(t *testing.T, url, queue string) {
	t.Helper()
	msgs := make([]amqp091.Publishing, 0, orderKeys*perKey)
	for i := 0; i < orderKeys*perKey; i++ {
		key := keyName(i % orderKeys)
		msgs = append(msgs, amqp091.Publishing{MessageId: fmt.Sprintf("%s/%d", key, i/orderKeys),
			Headers: amqp091.Table{orderHeader: key}, DeliveryMode: amqp091.Persistent, Body: []byte(`{}`)})
	}
	conn := dial(t, url)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	var last *amqp091.DeferredConfirmation
	for _, m := range msgs {
		if last, err = ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, false, false, m); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := last.WaitContext(context.Background()); err != nil || !ok {
		t.Fatalf("publish not confirmed: %v", err)
	}
}

// acks counts the deliveries the worker acknowledged (AckEvent.Messages) and its
// outcomes.
type acks struct {
	counters
	acked atomic.Int64
}

func (a *acks) OnAck(e consumer.AckEvent) { a.acked.Add(int64(e.Messages)) }

// 40 keys x 25 messages through a worker ordered by a header, prefetch 256: each
// key's messages run one at a time in publish order, different keys at once,
// every message runs once and is acked once.
func TestOrderingPerKey(t *testing.T) {
	url := testenv.AMQP(t)
	hooks := &acks{}
	store, _, _ := newStore(t, consumer.WithObserver(hooks))
	topo := topology(t, url, false)
	publishOrdered(t, url, topo.Queue)
	rec := newOrdered()
	// The first messages of two keys wait for each other: they run at once, or
	// both give up and the test fails.
	var meet sync.WaitGroup
	meet.Add(2)
	met := make(chan struct{})
	go func() { meet.Wait(); close(met) }()
	var apart atomic.Bool
	w, err := idemamqp.NewWorker(store, url, topo, func(ctx context.Context, d amqp091.Delivery) (int, error) {
		key, seq := rec.begin(d)
		defer rec.end(key)
		if seq == 0 && (key == keyName(0) || key == keyName(1)) {
			meet.Done()
			select {
			case <-met:
			case <-time.After(30 * time.Second):
				apart.Store(true)
			}
		}
		return seq, nil
	}, idemamqp.WithOrdering(idemamqp.ByKeyHeader(orderHeader)), idemamqp.WithPrefetch(256), idemamqp.WithConcurrency(64))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, w)
	testenv.Eventually(t, 120*time.Second, "every message acked", func() bool { return hooks.acked.Load() >= orderKeys*perKey })
	r.stop()
	rec.check(t)
	if apart.Load() {
		t.Error("two keys' first messages never ran at once")
	}
	if n := hooks.acked.Load(); n != orderKeys*perKey {
		t.Errorf("%d deliveries acked, want %d", n, orderKeys*perKey)
	}
	if s, d := hooks.outcomes[consumer.Success].Load(), hooks.outcomes[consumer.Duplicate].Load(); s != orderKeys*perKey || d != 0 {
		t.Errorf("%d SUCCESS and %d DUPLICATE, want %d and 0", s, d, orderKeys*perKey)
	}
	if q, dl := depth(t, url, topo.Queue), depth(t, url, topo.DeadLetterQueue); q != 0 || dl != 0 {
		t.Errorf("queue depth %d, dead-letter depth %d; want 0 and 0", q, dl)
	}
}

// One message stalls: the other 39 keys finish while it does, and so do the
// messages of its key before it; the acks of everything settled go out (one by
// one above the stalled tag), and none of its key after it runs until it returns.
func TestOrderingStallHoldsBackOnlyItsKey(t *testing.T) {
	url := testenv.AMQP(t)
	hooks := &acks{}
	store, _, _ := newStore(t, consumer.WithObserver(hooks))
	topo := topology(t, url, false)
	publishOrdered(t, url, topo.Queue)
	rec := newOrdered()
	stalled, stallAt := keyName(7), 5
	release := make(chan struct{})
	w, err := idemamqp.NewWorker(store, url, topo, func(ctx context.Context, d amqp091.Delivery) (int, error) {
		key, seq := rec.begin(d)
		defer rec.end(key)
		if key == stalled && seq == stallAt {
			<-release
		}
		return seq, nil
	}, idemamqp.WithOrdering(idemamqp.ByKeyHeader(orderHeader)), idemamqp.WithPrefetch(256))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, w)
	others := int64((orderKeys-1)*perKey + stallAt)
	testenv.Eventually(t, 120*time.Second, "the other keys to finish", func() bool { return rec.total.Load() >= others })
	testenv.Eventually(t, 30*time.Second, "their acks", func() bool { return hooks.acked.Load() >= others })
	if n := rec.ranOf(stalled); n != stallAt+1 {
		t.Errorf("the stalled key ran %d messages while message %d stalled, want %d", n, stallAt, stallAt+1)
	}
	if n, a := rec.total.Load(), hooks.acked.Load(); n != others || a != others {
		t.Errorf("while stalled: %d handled, %d acked; want %d and %d", n, a, others, others)
	}
	close(release)
	testenv.Eventually(t, 60*time.Second, "every message acked", func() bool { return hooks.acked.Load() >= orderKeys*perKey })
	r.stop()
	rec.check(t)
	if n := hooks.acked.Load(); n != orderKeys*perKey {
		t.Errorf("%d deliveries acked, want %d", n, orderKeys*perKey)
	}
	if q := depth(t, url, topo.Queue); q != 0 {
		t.Errorf("queue depth %d, want 0", q)
	}
}

// The connection is cut while a handler runs (and goes on running, its context
// cancelled): the broker redelivers every unacked delivery to the new session,
// among them the later messages of the running one's key and the running one
// itself. They keep their place: none runs before or beside the handler of the
// lost session, the redelivered copy of the running one finds it done (DUPLICATE),
// and every message runs exactly once, in order.
func TestOrderingRedeliveryKeepsItsPlace(t *testing.T) {
	for _, quorum := range []bool{false, true} {
		t.Run(map[bool]string{false: "classic", true: "quorum"}[quorum], func(t *testing.T) { redeliveryKeepsItsPlace(t, quorum) })
	}
}

func redeliveryKeepsItsPlace(t *testing.T, quorum bool) {
	url := testenv.AMQP(t)
	proxy, viaProxy := amqpProxy(t, url)
	hooks := &acks{}
	store, _, _ := newStore(t, consumer.WithObserver(hooks))
	topo := topology(t, url, quorum)
	publishOrdered(t, url, topo.Queue)
	rec := newOrdered()
	held, heldAt := keyName(3), 10
	running, release := make(chan struct{}), make(chan struct{})
	var cancelled atomic.Bool
	w, err := idemamqp.NewWorker(store, viaProxy, topo, func(ctx context.Context, d amqp091.Delivery) (int, error) {
		key, seq := rec.begin(d)
		defer rec.end(key)
		if key == held && seq == heldAt {
			close(running)
			<-release // it ignores its context: the lost session's handler outlives it
			cancelled.Store(ctx.Err() != nil)
		}
		time.Sleep(500 * time.Microsecond) // work: the other keys are mid-run when the connection goes
		return seq, nil
	}, idemamqp.WithOrdering(idemamqp.ByKeyHeader(orderHeader)), idemamqp.WithPrefetch(256),
		idemamqp.WithReconnectBackoff(20*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, w)
	select {
	case <-running:
	case <-time.After(120 * time.Second):
		t.Fatal("the held message never ran")
	}
	proxy.Reset()
	testenv.Eventually(t, 30*time.Second, "the worker to reconnect", func() bool { return hooks.resumes.Load() >= 1 })
	others := int64((orderKeys-1)*perKey + heldAt + 1)
	testenv.Eventually(t, 120*time.Second, "the other keys to finish", func() bool { return rec.total.Load() >= others-1 })
	if n := rec.ranOf(held); n != heldAt+1 {
		t.Errorf("while the lost session's handler ran, its key ran %d messages, want %d", n, heldAt+1)
	}
	close(release)
	testenv.Eventually(t, 120*time.Second, "every message settled", func() bool {
		return hooks.outcomes[consumer.Success].Load() >= orderKeys*perKey
	})
	testenv.Eventually(t, 60*time.Second, "the queue to drain", func() bool { return depth(t, url, topo.Queue) == 0 })
	r.stop()
	rec.check(t)
	if !cancelled.Load() {
		t.Error("the held handler's context was not cancelled when its session was lost")
	}
	rec.mu.Lock()
	redelivered := rec.redelivered
	rec.mu.Unlock()
	if redelivered == 0 {
		t.Error("no redelivered message ran: the connection was cut with nothing waiting")
	}
	if s := hooks.outcomes[consumer.Success].Load(); s != orderKeys*perKey {
		t.Errorf("%d SUCCESS, want %d", s, orderKeys*perKey)
	}
	if d := depth(t, url, topo.DeadLetterQueue); d != 0 {
		t.Errorf("%d dead-lettered, want 0", d)
	}
	t.Logf("%d redelivered messages ran; %d DUPLICATE; %d acked", redelivered,
		hooks.outcomes[consumer.Duplicate].Load(), hooks.acked.Load())
}

// A handler failure of an ordered message is retried in place, holding back its
// key: the later messages of the key wait for the retry, which succeeds.
func TestOrderingRetriesInPlace(t *testing.T) {
	url := testenv.AMQP(t)
	hooks := &acks{}
	store, _, _ := newStore(t, consumer.WithObserver(hooks))
	topo := topology(t, url, false)
	publishOrdered(t, url, topo.Queue)
	rec := newOrdered()
	var failed atomic.Int32
	w, err := idemamqp.NewWorker(store, url, topo, func(ctx context.Context, d amqp091.Delivery) (int, error) {
		if d.MessageId == keyName(9)+"/3" && failed.Add(1) <= 2 {
			return 0, errors.New("the ledger is busy") // retryable: runs again in place
		}
		key, seq := rec.begin(d)
		defer rec.end(key)
		return seq, nil
	}, idemamqp.WithOrdering(idemamqp.ByKeyHeader(orderHeader)))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, w)
	testenv.Eventually(t, 120*time.Second, "every message acked", func() bool { return hooks.acked.Load() >= orderKeys*perKey })
	r.stop()
	rec.check(t)
	if f, rt := failed.Load(), hooks.retries.Load(); f != 3 || rt != 2 {
		t.Errorf("%d runs of the failing message, %d retries; want 3 and 2", f, rt)
	}
	if d, rq := depth(t, url, topo.DeadLetterQueue), depth(t, url, topo.RetryQueue(topo.RetryDelays[0])); d != 0 || rq != 0 {
		t.Errorf("%d dead-lettered, %d in the first retry queue; want 0 and 0 (retried in place)", d, rq)
	}
}

// Bad orderings are refused by the constructor with an error that says what to fix.
func TestOrderingBadInput(t *testing.T) {
	store, _, _ := newStore(t)
	h := func(ctx context.Context, d amqp091.Delivery) (int, error) { return 0, nil }
	topo := idemamqp.Topology{Queue: "q"}
	for _, tc := range []struct {
		name string
		o    idemamqp.Ordering
		hint string
	}{
		{"empty header", idemamqp.ByKeyHeader(""), "name the header"},
		{"nil func", idemamqp.ByKeyFunc(nil), "ByKeyFunc(nil)"},
		{"nil value func", idemamqp.ByValueKey[order](nil), "ByValueKey(nil)"},
		{"value type", idemamqp.ByValueKey(func(o order) (string, error) { return o.ID, nil }), "ByValueKey) takes a amqp_test.order"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := idemamqp.NewWorker(store, testenv.LocalAMQPURL, topo, h, idemamqp.WithOrdering(tc.o))
			if w != nil || !errors.Is(err, idemamqp.ErrConfig) || !strings.Contains(err.Error(), tc.hint) {
				t.Fatalf("NewWorker: %v, %v; want ErrConfig mentioning %q", w, err, tc.hint)
			}
		})
	}
	// The same value ordering on a worker that decodes orders is fine.
	_, err := idemamqp.NewTypedWorker(store, testenv.LocalAMQPURL, topo, decodeOrder,
		func(ctx context.Context, o order, d amqp091.Delivery) (int, error) { return 0, nil },
		idemamqp.WithOrdering(idemamqp.ByValueKey(func(o order) (string, error) { return o.ID, nil })))
	if err != nil {
		t.Fatal(err)
	}
	if s := idemamqp.ByKeyHeader("account").String(); s != `key (header "account")` {
		t.Errorf("String() = %s", s)
	}
}

// A delivery without an ordering key runs, ordered by its idempotency key; one
// whose ordering function fails is dead-lettered (NO_KEY) with the reason, never
// run out of its order.
func TestOrderingKeyMissingOrFailing(t *testing.T) {
	url := testenv.AMQP(t)
	hooks := &acks{}
	store, _, _ := newStore(t, consumer.WithObserver(hooks))
	topo := topology(t, url, false)
	var ran sync.Map
	w, err := idemamqp.NewWorker(store, url, topo, func(ctx context.Context, d amqp091.Delivery) (int, error) {
		ran.Store(d.MessageId, true)
		return 0, nil
	}, idemamqp.WithOrdering(idemamqp.ByKeyFunc(func(d amqp091.Delivery) (string, error) {
		if d.MessageId == "bad" {
			return "", errors.New("no account in the job")
		}
		s, _ := d.Headers[orderHeader].(string)
		return s, nil
	})))
	if err != nil {
		t.Fatal(err)
	}
	publishRaw(t, url, topo.Queue,
		amqp091.Publishing{MessageId: "bad", Body: []byte(`{}`)},
		amqp091.Publishing{MessageId: "no-header", Body: []byte(`{}`)},
		amqp091.Publishing{MessageId: "keyed", Headers: amqp091.Table{orderHeader: "acct-1"}, Body: []byte(`{}`)})
	r := start(t, w)
	testenv.Eventually(t, 30*time.Second, "three deliveries acked", func() bool { return hooks.acked.Load() >= 3 })
	r.stop()
	_, bad := ran.Load("bad")
	_, missing := ran.Load("no-header")
	_, keyed := ran.Load("keyed")
	if bad || !missing || !keyed {
		t.Errorf("ran: bad %v, no-header %v, keyed %v; want false, true, true", bad, missing, keyed)
	}
	dead := drain(t, url, topo.DeadLetterQueue)
	if len(dead) != 1 || dead[0].MessageId != "bad" || dead[0].Headers[idemamqp.HeaderKind] != "NO_KEY" ||
		!strings.Contains(fmt.Sprint(dead[0].Headers[idemamqp.HeaderReason]), "ordering key: no account") {
		t.Errorf("dead letters %d, want the bad one with kind NO_KEY and its reason", len(dead))
	}
	if s, a := hooks.outcomes[consumer.Success].Load(), hooks.acked.Load(); s != 2 || a != 3 {
		t.Errorf("%d SUCCESS, %d acked; want 2 and 3", s, a)
	}
}
