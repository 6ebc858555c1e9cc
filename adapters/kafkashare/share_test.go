package kafkashare_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/kafkashare"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func newStore(t *testing.T, prefix string, obs ...consumer.Observer) consumer.Store {
	t.Helper()
	return newStoreLease(t, prefix, time.Second, obs...)
}

// newStoreLease is newStore with another lease.
func newStoreLease(t *testing.T, prefix string, lease time.Duration, obs ...consumer.Observer) consumer.Store {
	t.Helper()
	store, err := redisstore.NewStore(testenv.Redis(t), consumer.WithPrefix(prefix), consumer.WithScope("payments"),
		consumer.WithLease(lease), consumer.WithObserver(obs...))
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// Every event is charged once across two member clients, duplicates are
// accepted, a poison record and an undecodable one each produce exactly one
// dead-letter copy (with the classic adapter's headers) and are accepted, and
// nothing is left acquired. Nothing is released and every record is accepted
// exactly once: that holds while each record is settled within its lock and
// each claim within its lease, so both are given seconds here (30s, 10s; the
// whole run takes about 20s beside a CPU hog on 2 cores). With the 3s lock the
// other tests use, a machine that busy lets a poll of 100 records outlive its
// lock before its renewal is confirmed: the adapter then releases what has not
// run (as the package doc says), or accepts a record the broker already gave to
// the other member, which is accepted again as a DUPLICATE.
func TestShareGroupChargesOnceAndDeadLettersPoison(t *testing.T) {
	brokers, _ := shareKfakeLock(t, 30_000, 5, 2, "payments", "payments.dlq")
	startAtEarliest(t, brokers, "billing")
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	book := testenv.NewLedger(rdb, prefix)
	events := produce(t, brokers, "payments", 1000, 0.2)
	produceRaw(t, brokers,
		&kgo.Record{Topic: "payments", Value: []byte(`{"id":"poison","amount":1}`),
			Headers: []kgo.RecordHeader{{Key: kafkashare.DefaultKeyHeader, Value: []byte("poison")}}},
		&kgo.Record{Topic: "payments", Value: []byte(`not json`)})
	acts := newActions()
	var runs, poisonRuns atomic.Int64
	c, err := kafkashare.NewTyped(newStoreLease(t, prefix, 10*time.Second, acts), shareOpts(brokers, "billing", "payments"), decodeEvent,
		func(ctx context.Context, ev event, _ *kgo.Record) (int, error) {
			runs.Add(1)
			if n, ok := kafkashare.DeliveryCount(ctx); !ok || n < 1 {
				return 0, consumer.Permanent(errors.New("no delivery count on the handler's context"))
			}
			if ev.ID == "poison" {
				poisonRuns.Add(1)
				return 0, consumer.Permanent(errors.New("card declined"))
			}
			_, err := book.Apply(ctx, ev.ID)
			return ev.Amount, err
		}, kafkashare.WithClients(2), kafkashare.WithMaxPollRecords(100))
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	total := 1000 + 200 + 2
	testenv.Eventually(t, 120*time.Second, "every record acknowledged", func() bool {
		return unfinished(t, brokers, "billing", "payments", 2) == 0
	})
	counts, stale := book.Counts(t)
	for _, ev := range events {
		if counts[ev.ID] != 1 {
			t.Errorf("event %s charged %d times, want 1", ev.ID, counts[ev.ID])
		}
	}
	if stale != 0 || poisonRuns.Load() != 1 {
		t.Errorf("stale writes %d, poison runs %d; want 0 and 1", stale, poisonRuns.Load())
	}
	dls := deadLetters(t, brokers, "payments.dlq", 2)
	kinds := map[string]int{}
	for _, d := range dls {
		kinds[header(d, kafkashare.HeaderKind)]++
		if header(d, kafkashare.HeaderOriginalTopic) != "payments" || header(d, kafkashare.HeaderOriginalOffset) == "" {
			t.Errorf("dead letter without its coordinates: %v", d.Headers)
		}
	}
	if len(dls) != 2 || kinds["PERMANENT"] != 1 || kinds["UNDECODABLE"] != 1 {
		t.Fatalf("dead letters %d by kind %v; want one PERMANENT and one UNDECODABLE", len(dls), kinds)
	}
	accepted := acts.get("accept/success") + acts.get("accept/duplicate") + acts.get("accept/dead-lettered")
	acts.mu.Lock()
	byReason, outcomes := maps.Clone(acts.byReason), maps.Clone(acts.outcomes)
	acts.mu.Unlock()
	if accepted != total || acts.get("accept/dead-lettered") != 2 {
		t.Fatalf("accepted %d (%d dead-lettered), want %d (2); handler runs %d, actions %v, outcomes %v",
			accepted, acts.get("accept/dead-lettered"), total, runs.Load(), byReason, outcomes)
	}
	if n := acts.get("release/retry") + acts.get("release/busy") + acts.get("release/interrupted") + acts.get("release/lock-expiring"); n != 0 || runs.Load() != 1000+1 {
		t.Fatalf("%d records released, handler runs %d; want none, 1001 (actions %v, outcomes %v)", n, runs.Load(), byReason, outcomes)
	}
	if refused, applied := acts.answers(); refused != 0 || applied == 0 {
		t.Fatalf("broker answers: %d refused, %d applied; want 0 and some", refused, applied)
	}
}

// A record whose key another owner is running is held, its lock renewed well past
// the lock duration, and accepted as a DUPLICATE once the owner completes: on its
// first delivery, never released, its delivery count still 1.
func TestBusyKeyIsHeldNotCycled(t *testing.T) {
	brokers := shareCluster(t, 1, "payments", "payments.dlq")
	startAtEarliest(t, brokers, "billing")
	prefix := testenv.Prefix(t)
	acts := newActions()
	store := newStore(t, prefix, acts)

	// The other owner: holds the key's claim until told to finish.
	finish, started := make(chan struct{}), make(chan struct{})
	owner := make(chan consumer.Result[int], 1)
	go func() {
		owner <- consumer.ExecuteIdempotently(context.Background(), store, "busy", []byte(`{"id":"busy","amount":7}`),
			func(ctx context.Context) (int, error) {
				close(started)
				<-finish
				return 7, nil
			})
	}()
	<-started
	produceRaw(t, brokers, &kgo.Record{Topic: "payments", Value: []byte(`{"id":"busy","amount":7}`),
		Headers: []kgo.RecordHeader{{Key: kafkashare.DefaultKeyHeader, Value: []byte("busy")}}})

	var runs atomic.Int64
	c, err := kafkashare.NewTyped(store, shareOpts(brokers, "billing", "payments"), decodeEvent,
		func(context.Context, event, *kgo.Record) (int, error) { runs.Add(1); return 0, nil },
		kafkashare.WithAcquisitionMargin(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	// Renewals confirmed over three lock durations: the record outlived its first lock.
	testenv.Eventually(t, 60*time.Second, "the busy record's lock renewed 9 times", func() bool {
		return acts.get("renew/renew") >= 9
	})
	if n := acts.get("accept/duplicate") + acts.get("release/busy") + acts.get("release/lock-expiring"); n != 0 {
		t.Fatalf("the busy record was acknowledged (%d) while its key was running elsewhere", n)
	}
	close(finish)
	if r := <-owner; r.Outcome != consumer.Success {
		t.Fatalf("the other owner: %v %v", r.Outcome, r.Err)
	}
	testenv.Eventually(t, 30*time.Second, "the busy record accepted", func() bool {
		return unfinished(t, brokers, "billing", "payments", 1) == 0
	})
	acts.mu.Lock()
	defer acts.mu.Unlock()
	if acts.byReason["accept/duplicate"] != 1 || acts.maxCount[0] != 1 || runs.Load() != 0 {
		t.Fatalf("accepted as duplicate %d times, highest delivery count %d, handler runs %d; want 1, 1, 0 (actions %v)",
			acts.byReason["accept/duplicate"], acts.maxCount[0], runs.Load(), acts.byReason)
	}
	for reason, n := range acts.byReason {
		if reason != "accept/duplicate" && reason != "renew/renew" {
			t.Fatalf("unexpected acknowledgement %s x%d", reason, n)
		}
	}
}

// The broker refuses a batch of acknowledgements: the refusal reaches the
// observers through kgo.ShareAckCallback (ShareAckHook), the records come back
// when their locks run out, and the store answers their redelivery DUPLICATE:
// every event is still charged once and everything ends acknowledged.
func TestRefusedAcksReachObservers(t *testing.T) {
	brokers, cluster := shareKfake(t, 1, "payments", "payments.dlq")
	startAtEarliest(t, brokers, "billing")
	prefix := testenv.Prefix(t)
	book := testenv.NewLedger(testenv.Redis(t), prefix)
	events := produce(t, brokers, "payments", 20, 0)
	// The first request that carries acknowledgements (a ShareAcknowledge, or a
	// ShareFetch they ride on) is answered with an error, unapplied.
	var refused atomic.Int64
	refuse := func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		acks := false
		switch r := req.(type) {
		case *kmsg.ShareAcknowledgeRequest:
			acks = true
		case *kmsg.ShareFetchRequest:
			for _, tp := range r.Topics {
				for _, p := range tp.Partitions {
					acks = acks || len(p.AcknowledgementBatches) > 0
				}
			}
		}
		if !acks || refused.Add(1) > 1 {
			return nil, nil, false
		}
		switch resp := req.ResponseKind().(type) {
		case *kmsg.ShareAcknowledgeResponse:
			resp.ErrorCode = kerr.UnknownServerError.Code
			return resp, nil, true
		case *kmsg.ShareFetchResponse:
			resp.ErrorCode = kerr.UnknownServerError.Code
			return resp, nil, true
		}
		return nil, nil, false
	}
	cluster.ControlKey(int16(kmsg.ShareAcknowledge), refuse)
	cluster.ControlKey(int16(kmsg.ShareFetch), refuse)
	var last string
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(last)
		}
	})
	acts := newActions()
	c, err := kafkashare.NewTyped(newStore(t, prefix, acts), shareOpts(brokers, "billing", "payments"), decodeEvent,
		func(ctx context.Context, ev event, _ *kgo.Record) (int, error) {
			_, err := book.Apply(ctx, ev.ID)
			return ev.Amount, err
		})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	testenv.Eventually(t, 60*time.Second, "every record acknowledged after the refusal", func() bool {
		n, ok := acts.answers()
		acts.mu.Lock()
		last = fmt.Sprintf("refused %d, applied %d, refusals injected %d, acknowledgements %v", n, ok, refused.Load(), acts.byReason)
		acts.mu.Unlock()
		return n > 0 && unfinished(t, brokers, "billing", "payments", 1) == 0
	})
	counts, _ := book.Counts(t)
	for _, ev := range events {
		if counts[ev.ID] != 1 {
			t.Errorf("event %s charged %d times, want 1", ev.ID, counts[ev.ID])
		}
	}
	if n, _ := acts.answers(); n != 1 {
		t.Fatalf("%d refused answers reached the observers, want 1 (one request, one partition)", n)
	}
}

// Two consumers (two pipelines, as two services' replicas) share one partition;
// every event arrives three times. A key never runs in two handlers at once, and
// every event is charged exactly once.
func TestTwoMembersOnePartitionNeverRunAKeyTwiceAtOnce(t *testing.T) {
	brokers := shareCluster(t, 1, "payments", "payments.dlq")
	startAtEarliest(t, brokers, "billing")
	prefix := testenv.Prefix(t)
	book := testenv.NewLedger(testenv.Redis(t), prefix)
	events := produce(t, brokers, "payments", 300, 1)
	events2 := produce(t, brokers, "payments", 300, 0) // the same ids a third time
	if len(events2) != len(events) {
		t.Fatal("produce")
	}
	var mu sync.Mutex
	running := map[string]int{}
	var overlaps atomic.Int64
	handler := func(ctx context.Context, ev event, _ *kgo.Record) (int, error) {
		mu.Lock()
		running[ev.ID]++
		if running[ev.ID] > 1 {
			overlaps.Add(1)
		}
		mu.Unlock()
		time.Sleep(3 * time.Millisecond)
		_, err := book.Apply(ctx, ev.ID)
		mu.Lock()
		running[ev.ID]--
		mu.Unlock()
		return ev.Amount, err
	}
	for range 2 {
		c, err := kafkashare.NewTyped(newStore(t, prefix), shareOpts(brokers, "billing", "payments"), decodeEvent, handler,
			kafkashare.WithMaxPollRecords(40))
		if err != nil {
			t.Fatal(err)
		}
		run(t, c)
	}
	testenv.Eventually(t, 120*time.Second, "every record acknowledged", func() bool {
		return unfinished(t, brokers, "billing", "payments", 1) == 0
	})
	counts, _ := book.Counts(t)
	for _, ev := range events {
		if counts[ev.ID] != 1 {
			t.Errorf("event %s charged %d times, want 1", ev.ID, counts[ev.ID])
		}
	}
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("a key ran in two handlers at once %d times", n)
	}
}

// The store is unreachable while a record is held: the record is kept, its lock
// renewed past two lock durations, and tried again in place, not as an attempt;
// once the store answers it runs once and is accepted on its first delivery.
func TestStoreOutageHoldsTheRecord(t *testing.T) {
	brokers := shareCluster(t, 1, "payments", "payments.dlq")
	startAtEarliest(t, brokers, "billing")
	proxy := testenv.NewFaultProxy(t, testenv.RedisAddr(t))
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	acts := newActions()
	store, err := redisstore.NewStore(rdb, consumer.WithPrefix(testenv.Prefix(t)), consumer.WithScope("payments"),
		consumer.WithLease(time.Second), consumer.WithCallTimeout(300*time.Millisecond), consumer.WithObserver(acts))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	c, err := kafkashare.NewTyped(store, shareOpts(brokers, "billing", "payments"), decodeEvent,
		func(context.Context, event, *kgo.Record) (int, error) { runs.Add(1); return 1, nil },
		kafkashare.WithBackoff(50*time.Millisecond, 200*time.Millisecond), kafkashare.WithAcquisitionMargin(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole()
	run(t, c)
	produceRaw(t, brokers, &kgo.Record{Topic: "payments", Value: []byte(`{"id":"held","amount":1}`),
		Headers: []kgo.RecordHeader{{Key: kafkashare.DefaultKeyHeader, Value: []byte("held")}}})
	testenv.Eventually(t, 60*time.Second, "the held record's lock renewed 7 times while the store is down", func() bool {
		return acts.get("renew/renew") >= 7
	})
	if runs.Load() != 0 {
		t.Fatalf("the handler ran %d times without the store", runs.Load())
	}
	proxy.Pass()
	testenv.Eventually(t, 60*time.Second, "the record accepted once the store answers", func() bool {
		return unfinished(t, brokers, "billing", "payments", 1) == 0
	})
	acts.mu.Lock()
	defer acts.mu.Unlock()
	if runs.Load() != 1 || acts.byReason["accept/success"] != 1 || acts.maxCount[0] != 1 {
		t.Fatalf("runs %d, accepted %d, highest delivery count %d; want 1, 1, 1 (actions %v)",
			runs.Load(), acts.byReason["accept/success"], acts.maxCount[0], acts.byReason)
	}
	for reason := range acts.byReason {
		if strings.HasPrefix(reason, "release/") {
			t.Fatalf("the record was released (%s) during the outage", reason)
		}
	}
}
