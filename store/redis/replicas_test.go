package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
)

// TestReplicaAcksBadInput: WithReplicaAcks out of range is refused by NewStore
// with ErrInvalidConfig, saying what to change.
func TestReplicaAcksBadInput(t *testing.T) {
	c := testenv.Redis(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": testenv.RedisAddr(t)}})
	t.Cleanup(func() { _ = ring.Close() })
	short := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), ReadTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = short.Close() })
	cases := []struct {
		name   string
		client redis.UniversalClient
		opts   []consumer.Option
		says   string
	}{
		{"negative count", c, []consumer.Option{redisstore.WithReplicaAcks(-1, time.Second)}, "replica count -1"},
		{"zero timeout", c, []consumer.Option{redisstore.WithReplicaAcks(1, 0)}, "timeout above 0"},
		{"negative timeout", c, []consumer.Option{redisstore.WithReplicaAcks(1, -time.Second)}, "timeout above 0"},
		{"fraction of a millisecond", c, []consumer.Option{redisstore.WithReplicaAcks(1, 1500*time.Microsecond)}, "whole number of milliseconds"},
		{"not below the call timeout", c, []consumer.Option{redisstore.WithReplicaAcks(1, time.Second),
			consumer.WithCallTimeout(time.Second)}, "raise WithCallTimeout"},
		{"not below the read timeout", short, []consumer.Option{redisstore.WithReplicaAcks(1, 200*time.Millisecond)}, "ReadTimeout"},
		{"ring", ring, []consumer.Option{redisstore.WithReplicaAcks(1, 100*time.Millisecond)}, "Ring"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := redisstore.NewStore(tc.client, append([]consumer.Option{consumer.WithPrefix(testenv.Prefix(t))}, tc.opts...)...)
			if !errors.Is(err, consumer.ErrInvalidConfig) || s != nil {
				t.Fatalf("NewStore = %v, %v; want ErrInvalidConfig", s, err)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("error %q does not say %q", err, tc.says)
			}
		})
	}
	// Off, and on a single server without replicas: accepted.
	for _, opts := range [][]consumer.Option{{redisstore.WithReplicaAcks(0, time.Second)}, {redisstore.WithReplicaAcks(1, 100*time.Millisecond)}} {
		if _, err := redisstore.NewStore(c, append([]consumer.Option{consumer.WithPrefix(testenv.Prefix(t))}, opts...)...); err != nil {
			t.Fatal(err)
		}
	}
}

// runCounter counts handler runs per key.
type runCounter struct {
	mu   sync.Mutex
	runs map[consumer.Key]int
}

func (c *runCounter) handler(key consumer.Key) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.runs[key]++
		return "done " + string(key), nil
	}
}

func (c *runCounter) of(key consumer.Key) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[key]
}

func (c *runCounter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.runs {
		n += v
	}
	return n
}

// TestReplicaAcksSentinelPartition shows what WithReplicaAcks(1, ...) promises on
// a Sentinel-managed primary with one replica, whose replication link is cut
// (blackholed, not closed) and healed: while the replica is partitioned no
// completion is reported done (a completion whose lease runs out meanwhile is
// reported not durable, a retryable store error, and its next delivery is a
// duplicate); a claim under WithReplicaAcksOnClaims is refused as not durable and
// its handler does not run; every handler runs exactly once; once the link heals
// the pending completions are reported done; and after a failover (the primary
// SIGKILLed, the replica promoted) every completion that was reported done is
// still there.
func TestReplicaAcksSentinelPartition(t *testing.T) {
	env := testenv.RedisReplicatedSentinel(t)
	client := env.Client(t)
	replica := env.Replica.Client(t)
	ctx := context.Background()
	prefix := testenv.Prefix(t)
	newStore := func(lease time.Duration, extra ...consumer.Option) *redisstore.Store {
		t.Helper()
		opts := append([]consumer.Option{consumer.WithPrefix(prefix), consumer.WithScope("durability"),
			consumer.WithLease(lease), consumer.WithCallTimeout(time.Second),
			redisstore.WithReplicaAcks(1, 200*time.Millisecond)}, extra...)
		s, err := redisstore.NewStore(client, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	long := newStore(30 * time.Second)                                       // outlives the partition
	short := newStore(2 * time.Second)                                       // runs out during it
	claims := newStore(30*time.Second, redisstore.WithReplicaAcksOnClaims()) // claims wait too
	rc := &runCounter{runs: map[consumer.Key]int{}}
	keys := func(name string, n int) []consumer.Key {
		out := make([]consumer.Key, n)
		for i := range out {
			out[i] = consumer.Key(fmt.Sprintf("%s-%d", name, i))
		}
		return out
	}
	run := func(s *redisstore.Store, k consumer.Key) consumer.Result[string] {
		return consumer.ExecuteIdempotently(ctx, s, k, []byte("p"), rc.handler(k))
	}
	onReplica := func(s *redisstore.Store, k consumer.Key) bool {
		return replica.Exists(ctx, s.RecordKey(k)).Val() == 1
	}
	peekState := func(s *redisstore.Store, k consumer.Key) string {
		rec, err := s.Peek(ctx, k)
		if err != nil {
			t.Fatalf("peek %s: %v", k, err)
		}
		return rec.State
	}

	// The replica in sync: completions are reported done, and the replica has them.
	before := keys("before", 10)
	for _, k := range before {
		if r := run(long, k); r.Outcome != consumer.Success {
			t.Fatalf("%s before the partition: %v %v", k, r.Outcome, r.Err)
		}
		if !onReplica(long, k) {
			t.Fatalf("%s reported done before the replica acknowledged it", k)
		}
	}

	env.Link.Blackhole()

	// A completion whose lease runs out while the replica is partitioned: reported
	// not durable (a retryable store error), after its handler ran once.
	lapsed := keys("lapsed", 3)
	for _, k := range lapsed {
		r := run(short, k)
		if r.Outcome != consumer.Error || !errors.Is(r.Err, redisstore.ErrNotDurable) || !errors.Is(r.Err, consumer.ErrStoreUnavailable) {
			t.Fatalf("%s during the partition: %v %v; want a not-durable store error", k, r.Outcome, r.Err)
		}
		if st := peekState(short, k); st != "completed" {
			t.Fatalf("%s on the primary: %s; want completed", k, st)
		}
		if onReplica(short, k) {
			t.Fatalf("%s reached the replica through the partition", k)
		}
	}

	// A duplicate read from the primary waits for the replica too: the completion it
	// found was not durable. Reported not durable, no handler run.
	if r := run(long, lapsed[0]); r.Outcome != consumer.Error || !errors.Is(r.Err, redisstore.ErrNotDurable) {
		t.Fatalf("%s again during the partition: %v %v; want a not-durable store error", lapsed[0], r.Outcome, r.Err)
	}

	// A claim that waits for the replica: refused as not durable, its handler not run.
	refused := keys("refused", 2)
	for _, k := range refused {
		r := run(claims, k)
		if r.Outcome != consumer.Error || !errors.Is(r.Err, redisstore.ErrNotDurable) {
			t.Fatalf("%s claimed during the partition: %v %v; want a not-durable store error", k, r.Outcome, r.Err)
		}
	}

	// Completions with a lease that outlives the partition: sent again and again,
	// never reported done while the replica is cut off.
	pending := keys("pending", 5)
	results := make(chan consumer.Result[string], len(pending))
	var wg sync.WaitGroup
	for _, k := range pending {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results <- run(long, k)
		}()
	}
	defer wg.Wait()
	testenv.Eventually(t, 20*time.Second, "the pending handlers to run and complete on the primary", func() bool {
		for _, k := range pending {
			if rc.of(k) != 1 || peekState(long, k) != "completed" {
				return false
			}
		}
		return true
	})
	select {
	case r := <-results:
		t.Fatalf("%s reported while the replica is partitioned: %v %v", r.Key, r.Outcome, r.Err)
	default:
	}
	for _, k := range pending {
		if onReplica(long, k) {
			t.Fatalf("%s reached the replica through the partition", k)
		}
	}

	env.Link.Pass()

	// Healed: the pending completions are reported done, the lapsed ones are
	// duplicates, the refused claims run now; every handler ran exactly once.
	wg.Wait()
	close(results)
	for r := range results {
		if r.Outcome != consumer.Success {
			t.Fatalf("%s after the partition healed: %v %v", r.Key, r.Outcome, r.Err)
		}
	}
	for _, k := range lapsed {
		if r := run(long, k); r.Outcome != consumer.Duplicate || r.Value != "done "+string(k) {
			t.Fatalf("%s after the partition: %v %q %v; want its duplicate", k, r.Outcome, r.Value, r.Err)
		}
	}
	for _, k := range refused {
		if r := run(claims, k); r.Outcome != consumer.Success {
			t.Fatalf("%s after the partition: %v %v", k, r.Outcome, r.Err)
		}
	}
	all := append(append(append(append([]consumer.Key{}, before...), lapsed...), refused...), pending...)
	for _, k := range all {
		if n := rc.of(k); n != 1 {
			t.Fatalf("%s: handler ran %d times; want 1", k, n)
		}
	}
	if n := rc.total(); n != 20 {
		t.Fatalf("handler runs: %d; want 20", n)
	}
	for _, k := range append(append([]consumer.Key{}, before...), pending...) {
		if !onReplica(long, k) {
			t.Fatalf("%s reported done but missing on the replica", k)
		}
	}
	env.WaitSynced(t, 20*time.Second) // the lapsed ones, which no one waited for, too

	// A failover: the primary SIGKILLed, the replica promoted. Every completion
	// reported done is there: each key is a duplicate, no handler runs again. (Read
	// through a store that does not wait: the promoted replica has no replica of
	// its own, so under WithReplicaAcks every answer is now not durable.)
	env.Failover(t, 60*time.Second)
	reader, err := redisstore.NewStore(client, consumer.WithPrefix(prefix), consumer.WithScope("durability"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range all {
		var r consumer.Result[string]
		testenv.Eventually(t, 30*time.Second, "the client to reach the promoted replica", func() bool {
			r = run(reader, k)
			return !errors.Is(r.Err, consumer.ErrStoreUnavailable)
		})
		if r.Outcome != consumer.Duplicate || r.Value != "done "+string(k) {
			t.Fatalf("%s after the failover: %v %q %v; want its duplicate", k, r.Outcome, r.Value, r.Err)
		}
	}
	// With no replica left, a new completion runs once and is not durable.
	if r := run(short, "after"); r.Outcome != consumer.Error || !errors.Is(r.Err, redisstore.ErrNotDurable) {
		t.Fatalf("a completion with no replica: %v %v; want a not-durable store error", r.Outcome, r.Err)
	}
	if n := rc.total(); n != 21 || rc.of("after") != 1 {
		t.Fatalf("handler runs after the failover: %d (%d of them the new key's); want 21 (1)", n, rc.of("after"))
	}
}

// TestReplicaAcksCluster: on a Redis Cluster of three masters with one replica
// each, WithReplicaAcks waits on every master a batch wrote to. 300 keys over all
// three: every completion is reported done only once its replica has it (the 300
// records are on the replicas when ExecuteBatch returns), each handler ran once.
// Asking for two replicas where each master has one: every settlement of a batch
// is reported not durable, no handler runs twice, and the keys are duplicates
// afterwards; under WithReplicaAcksOnClaims the claims are refused instead, no
// handler runs, and the keys run once when asked of one replica. With one
// replica stalled, one batch over all masters completes its keys on the other
// masters and reports those on the stalled replica's master not durable, naming
// that master; reading those keys again while it sleeps is not durable either, and
// once it has caught up they are duplicates.
func TestReplicaAcksCluster(t *testing.T) {
	rc := testenv.RedisReplicatedCluster(t)
	client := rc.Client(t)
	ctx := context.Background()
	prefix := testenv.Prefix(t)
	newStore := func(n int, lease time.Duration, extra ...consumer.Option) *redisstore.Store {
		t.Helper()
		opts := append([]consumer.Option{consumer.WithPrefix(prefix), consumer.WithScope("cluster"),
			consumer.WithLease(lease), consumer.WithCallTimeout(2 * time.Second),
			redisstore.WithReplicaAcks(n, 300*time.Millisecond)}, extra...)
		s, err := redisstore.NewStore(client, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	rcount := &runCounter{runs: map[consumer.Key]int{}}
	batch := func(s *redisstore.Store, name string, n int) []consumer.Result[string] {
		items := make([]consumer.BatchItem, n)
		for i := range items {
			items[i] = consumer.BatchItem{Key: consumer.Key(fmt.Sprintf("%s-%d", name, i))}
		}
		return consumer.ExecuteBatch(ctx, s, items, func(ctx context.Context, _ int, it consumer.BatchItem) (string, error) {
			return rcount.handler(it.Key)(ctx)
		})
	}
	// A healthy replica gets a second to answer, not 300 ms: on a busy machine
	// its acknowledgement can take longer than the stalled cases need to time out.
	one := newStore(1, 30*time.Second, redisstore.WithReplicaAcksOnClaims(), redisstore.WithReplicaAcks(1, time.Second))
	for lo := 0; lo < 300; lo += 100 {
		for _, r := range batch(one, fmt.Sprintf("acked-%d", lo), 100) {
			if r.Outcome != consumer.Success {
				t.Fatalf("%s: %v %v", r.Key, r.Outcome, r.Err)
			}
		}
	}
	// Every record is on a replica already: count them there.
	onReplicas, replicasWithSome := 0, 0
	for _, r := range rc.Replicas {
		c := r.Client(t)
		var keys []string
		iter := c.Scan(ctx, 0, prefix+":{cluster:acked-*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
		onReplicas += len(keys)
		if len(keys) > 0 {
			replicasWithSome++
		}
	}
	if onReplicas != 300 || replicasWithSome != 3 {
		t.Fatalf("%d records on the replicas (%d of 3 replicas hold some); want 300 over all 3", onReplicas, replicasWithSome)
	}

	two := newStore(2, time.Second)
	for _, r := range batch(two, "short", 30) {
		var nd *redisstore.NotDurableError
		if r.Outcome != consumer.Error || !errors.As(r.Err, &nd) || nd.Want != 2 || nd.Acked > 1 {
			t.Fatalf("%s with two replicas asked of one: %v %v; want a not-durable store error", r.Key, r.Outcome, r.Err)
		}
	}
	if n := rcount.total(); n != 330 {
		t.Fatalf("handler runs %d; want 330", n)
	}
	twoClaims := newStore(2, time.Second, redisstore.WithReplicaAcksOnClaims())
	for _, r := range batch(twoClaims, "refused", 30) {
		var nd *redisstore.NotDurableError
		if r.Outcome != consumer.Error || !errors.As(r.Err, &nd) || !nd.Claiming {
			t.Fatalf("%s claimed with two replicas asked of one: %v %v; want a not-durable claim", r.Key, r.Outcome, r.Err)
		}
	}
	if n := rcount.total(); n != 330 {
		t.Fatalf("handler runs after refused claims %d; want 330", n)
	}
	for _, r := range batch(one, "short", 30) {
		if r.Outcome != consumer.Duplicate {
			t.Fatalf("%s again: %v %v; want its duplicate", r.Key, r.Outcome, r.Err)
		}
	}
	for _, r := range batch(one, "refused", 30) {
		if r.Outcome != consumer.Success {
			t.Fatalf("%s again: %v %v; want it run now", r.Key, r.Outcome, r.Err)
		}
	}
	if n := rcount.total(); n != 360 {
		t.Fatalf("handler runs %d; want 360", n)
	}

	// One replica stalls (DEBUG SLEEP), as a partition stalls its replication.
	byMaster := map[string][]consumer.Key{}
	for i := 0; len(byMaster[rc.Nodes[0].Addr]) < 20 || len(byMaster[rc.Nodes[1].Addr]) < 20 || len(byMaster[rc.Nodes[2].Addr]) < 20; i++ {
		k := consumer.Key(fmt.Sprintf("stall-%d", i))
		m, err := client.MasterForKey(ctx, one.RecordKey(k))
		if err != nil {
			t.Fatal(err)
		}
		byMaster[m.Options().Addr] = append(byMaster[m.Options().Addr], k)
	}
	// Sent once, read without a timeout: a retried DEBUG SLEEP would queue another.
	stalled := redis.NewClient(&redis.Options{Addr: rc.Replicas[2].Addr, ReadTimeout: -1, MaxRetries: -1})
	defer stalled.Close()
	sleeping := make(chan error, 1)
	go func() { sleeping <- stalled.Do(context.Background(), "DEBUG", "SLEEP", "6").Err() }()
	probe := redis.NewClient(&redis.Options{Addr: rc.Replicas[2].Addr, ReadTimeout: 50 * time.Millisecond, MaxRetries: -1})
	defer probe.Close()
	testenv.Eventually(t, 10*time.Second, "the replica to stall", func() bool { return probe.Ping(ctx).Err() != nil })
	run := func(s *redisstore.Store, keys []consumer.Key) []consumer.Result[string] {
		items := make([]consumer.BatchItem, len(keys))
		for i, k := range keys {
			items[i] = consumer.BatchItem{Key: k}
		}
		return consumer.ExecuteBatch(ctx, s, items, func(ctx context.Context, _ int, it consumer.BatchItem) (string, error) {
			return rcount.handler(it.Key)(ctx)
		})
	}
	// One batch over all three masters: the keys of the two whose replicas answer
	// are reported done, those of the stalled replica's master not durable.
	healthy := append(append([]consumer.Key{}, byMaster[rc.Nodes[0].Addr]...), byMaster[rc.Nodes[1].Addr]...)
	stalledKeys := byMaster[rc.Nodes[2].Addr]
	onStalled := map[consumer.Key]bool{}
	for _, k := range stalledKeys {
		onStalled[k] = true
	}
	short := newStore(1, time.Second)
	for _, r := range run(short, append(append([]consumer.Key{}, healthy...), stalledKeys...)) {
		var nd *redisstore.NotDurableError
		switch {
		case !onStalled[r.Key] && r.Outcome != consumer.Success:
			t.Fatalf("%s on a master whose replica answers: %v %v", r.Key, r.Outcome, r.Err)
		case onStalled[r.Key] && (r.Outcome != consumer.Error || !errors.As(r.Err, &nd) || nd.Addr != rc.Nodes[2].Addr):
			t.Fatalf("%s on the master of the stalled replica: %v %v; want not durable there", r.Key, r.Outcome, r.Err)
		}
	}
	// Read again while the replica sleeps: the records found were not durable, so
	// the duplicates are not either; no handler runs.
	for _, r := range run(one, stalledKeys) {
		if r.Outcome != consumer.Error || !errors.Is(r.Err, redisstore.ErrNotDurable) {
			t.Fatalf("%s again while its replica is stalled: %v %v; want not durable", r.Key, r.Outcome, r.Err)
		}
	}
	if err := <-sleeping; err != nil {
		t.Fatalf("DEBUG SLEEP: %v", err)
	}
	master := redis.NewClient(&redis.Options{Addr: rc.Nodes[2].Addr})
	defer master.Close()
	probeKey := one.RecordKey(stalledKeys[0]) + ":probe" // the same hash tag: on that master
	testenv.Eventually(t, 30*time.Second, "the stalled replica to catch up", func() bool {
		n, err := testenv.ReplicasAcked(ctx, master, probeKey, 1, 100*time.Millisecond)
		return err == nil && n == 1
	})
	for _, r := range run(one, stalledKeys) { // the primary has them, and now the replica: duplicates
		if r.Outcome != consumer.Duplicate {
			t.Fatalf("%s again: %v %v; want its duplicate", r.Key, r.Outcome, r.Err)
		}
	}
	want := 360 + len(healthy) + len(stalledKeys)
	if n := rcount.total(); n != want {
		t.Fatalf("handler runs %d; want %d", n, want)
	}
	for k, n := range rcount.runs {
		if n != 1 {
			t.Fatalf("%s ran %d times", k, n)
		}
	}
}
