package redis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/lua"
	goredis "github.com/redis/go-redis/v9"
)

// ErrNotDurable matches a transition the primary applied but fewer replicas than
// WithReplicaAcks asked for acknowledged within its timeout.
var ErrNotDurable = errors.New("redis: not durable")

// NotDurableError says how many replicas acknowledged a write in time. It matches
// ErrNotDurable.
type NotDurableError struct {
	Addr     string        // the primary that applied the write
	Acked    int           // replicas that acknowledged it within Timeout
	Want     int           // replicas WithReplicaAcks asked for
	Timeout  time.Duration // WithReplicaAcks's timeout
	Claiming bool          // it answered a claim (a claim granted, or a record found settled)
}

func (e *NotDurableError) Error() string {
	what, then := "settlement", "it is applied on the primary and is sent again while the lease lives (the handler does not run again)"
	if e.Claiming {
		what, then = "record a claim made or found", "the claim is not used (the message is retried)"
	}
	return fmt.Sprintf("redis: not durable: %d of %d replicas of %s acknowledged the %s within %v: %s; "+
		"check the replicas' links (INFO replication) or lower WithReplicaAcks's count",
		e.Acked, e.Want, e.Addr, what, e.Timeout, then)
}

// Unwrap returns ErrNotDurable.
func (e *NotDurableError) Unwrap() error { return ErrNotDurable }

// WithReplicaAcks makes settlements wait until n replicas acknowledged them (Redis
// WAIT), for at most timeout, before the outcome is reported, and so do claims
// answered with an outcome (a duplicate of a completed or failed record, an
// exhausted key), since the record they read may come from a settlement that was
// reported not durable; the package's durability levels say what a timeout
// reports. Default: off (n 0: the primary's answer is the outcome). n must be at
// least 0, and timeout more than 0, in whole milliseconds, and below both the
// store's call timeout (WithCallTimeout) and the client's read timeout, so that
// the wait ends before the call's bound does. It works with a single server or a
// Sentinel-managed primary (one WAIT per call) and with Redis Cluster (one WAIT
// per primary the call wrote to); NewStore refuses it with a go-redis Ring, whose
// shards have no replication to wait for. Each waiting call costs one more round
// trip, which lasts until the replicas answer. The memory store ignores it.
func WithReplicaAcks(n int, timeout time.Duration) consumer.Option {
	return consumer.StoreSetting(replicaAcksKey{}, replicaAcks{n: n, timeout: timeout, set: true})
}

// WithReplicaAcksOnClaims makes granted claims wait for the replicas
// WithReplicaAcks names, too: a claim the primary granted but too few replicas
// acknowledged is given back (released, not counted as an attempt) and answered as
// not durable, so its handler does not start on a claim a failover could lose,
// where a second worker could claim the key again while the first still runs. A
// key in progress elsewhere or in conflict does not wait. Default: off (claims are
// reported once the primary granted them). Without WithReplicaAcks it does nothing.
func WithReplicaAcksOnClaims() consumer.Option {
	return consumer.StoreSetting(claimAcksKey{}, true)
}

// replicaAcksKey and claimAcksKey carry the options' values in the store's Settings.
type (
	replicaAcksKey struct{}
	claimAcksKey   struct{}
)

// replicaAcks is what WithReplicaAcks and WithReplicaAcksOnClaims set.
type replicaAcks struct {
	n       int
	timeout time.Duration
	set     bool
	claims  bool
}

// replicaAcksOf reads and checks the options against s and client.
func replicaAcksOf(s consumer.Settings, client goredis.UniversalClient) (replicaAcks, error) {
	a, _ := s.StoreSetting(replicaAcksKey{}).(replicaAcks)
	if !a.set {
		return replicaAcks{}, nil
	}
	a.claims, _ = s.StoreSetting(claimAcksKey{}).(bool)
	switch {
	case a.n < 0:
		return a, configError("replica count %d: WithReplicaAcks takes 0 (off) or more replicas to wait for", a.n)
	case a.timeout <= 0:
		return a, configError("replica timeout %v: WithReplicaAcks takes a timeout above 0, e.g. 250*time.Millisecond", a.timeout)
	case a.timeout%time.Millisecond != 0:
		return a, configError("replica timeout %v: WithReplicaAcks takes a whole number of milliseconds (WAIT counts in them)", a.timeout)
	case a.timeout >= s.CallTimeout:
		return a, configError("replica timeout %v is not below the call timeout %v: the call would be cut off before "+
			"WAIT answers; lower WithReplicaAcks's timeout or raise WithCallTimeout", a.timeout, s.CallTimeout)
	}
	if a.n == 0 {
		return replicaAcks{}, nil
	}
	var read time.Duration
	switch c := client.(type) {
	case *goredis.Client:
		read = c.Options().ReadTimeout
	case *goredis.ClusterClient:
		read = c.Options().ReadTimeout
	default:
		return a, configError("WithReplicaAcks with a %T: it waits for the replicas of a *redis.Client (one server or "+
			"a Sentinel-managed primary) or a *redis.ClusterClient; a Ring's shards have no replication to wait for", client)
	}
	if read > 0 && a.timeout >= read {
		return a, configError("replica timeout %v is not below the client's ReadTimeout %v: the wait would be cut off "+
			"as a read timeout; lower WithReplicaAcks's timeout or raise the client's ReadTimeout", a.timeout, read)
	}
	return a, nil
}

// awaitReplicas waits until the replicas of every primary that holds one of keys
// acknowledged every write this store made to it before the call, and answers
// per key: nil, or why its primary's replicas did not acknowledge. WAIT counts a
// connection's writes, and a pooled connection need not be the one that carried
// them, so each wait goes in one round trip behind a write of its own (a marker
// key beside the records, on the same primary, expiring at once): the replication
// offset that write reaches covers every write the primary applied before it.
func (r *Store) awaitReplicas(ctx context.Context, keys []string, claiming bool) []error {
	out := make([]error, len(keys))
	switch c := r.client.(type) {
	case *goredis.Client:
		if err := r.awaitNode(ctx, c, r.s.Prefix+":acks", claiming); err != nil {
			for i := range out {
				out[i] = err
			}
		}
	case *goredis.ClusterClient:
		r.awaitCluster(ctx, c, keys, claiming, out)
	default: // NewStore refuses it
		err := configError("WithReplicaAcks with a %T", r.client)
		for i := range out {
			out[i] = err
		}
	}
	return out
}

// awaitCluster waits on each primary that holds one of keys, all at once, and
// sets out[i] for the keys of a primary whose replicas did not acknowledge.
func (r *Store) awaitCluster(ctx context.Context, cc *goredis.ClusterClient, keys []string, claiming bool, out []error) {
	type primary struct {
		mark string
		idx  []int
		err  error
	}
	var nodes []*primary
	at := map[*goredis.Client]*primary{}
	for i, k := range keys {
		node, err := cc.MasterForKey(ctx, k)
		if err != nil {
			out[i] = err
			continue
		}
		p := at[node]
		if p == nil {
			p = &primary{mark: r.s.Prefix + ":acks:{" + lua.HashTag(k) + "}"}
			at[node] = p
			nodes = append(nodes, p)
		}
		p.idx = append(p.idx, i)
	}
	var wg sync.WaitGroup
	for node, p := range at {
		if len(at) == 1 {
			p.err = r.awaitNode(ctx, node, p.mark, claiming)
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.err = r.awaitNode(ctx, node, p.mark, claiming)
		}()
	}
	wg.Wait()
	for _, p := range nodes {
		for _, i := range p.idx {
			out[i] = p.err
		}
	}
}

// markerTTL is how long a marker key lives: nothing reads it.
const markerTTL = time.Second

// awaitNode sends a marker write and WAIT on one connection to node, bounded by
// ctx whether or not the client honours context deadlines.
func (r *Store) awaitNode(ctx context.Context, node *goredis.Client, mark string, claiming bool) error {
	run := func() error {
		pipe := node.Pipeline()
		set := pipe.Set(ctx, mark, "", markerTTL)
		wait := goredis.NewIntCmd(ctx, "wait", r.acks.n, r.acks.timeout.Milliseconds())
		_ = pipe.Process(ctx, wait)
		_, _ = pipe.Exec(ctx)
		if err := set.Err(); err != nil {
			return fmt.Errorf("the write WAIT follows: %w", err)
		}
		got, err := wait.Result()
		if err != nil {
			return fmt.Errorf("WAIT: %w", err)
		}
		if int(got) < r.acks.n {
			return &NotDurableError{Addr: addrOf(node), Acked: int(got), Want: r.acks.n, Timeout: r.acks.timeout, Claiming: claiming}
		}
		return nil
	}
	if node.Options().ContextTimeoutEnabled || ctx.Done() == nil {
		return run()
	}
	done := make(chan error, 1)
	go func() { done <- run() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("no answer to WAIT before the call's bound: %w", context.Cause(ctx))
	}
}

// settleAcks waits for the replicas of the settlements b applied, and answers
// those as not durable (a *consumer.StoreError) when they did not acknowledge.
func (r *Store) settleAcks(ctx context.Context, b *settleBatch) {
	var keys []string
	var applied []int
	for i := range b.out {
		if b.out[i].Err != nil {
			continue
		}
		applied = append(applied, i)
		if b.refs != nil {
			keys = append(keys, b.refs[i])
		} else {
			keys = append(keys, b.items[i].Ref)
		}
	}
	if len(applied) == 0 {
		return
	}
	for j, err := range r.awaitReplicas(ctx, keys, false) {
		if err == nil {
			continue
		}
		i := applied[j]
		op := "complete"
		if !b.items[i].Complete {
			op = "fail"
		}
		b.out[i] = consumer.SettleReply{Err: &consumer.StoreError{Op: op, Err: err}}
	}
}

// claimAcks waits for the replicas behind the claim answers of b that report an
// outcome (a duplicate of a completed or failed record, an exhausted key: the
// record read may come from a settlement that was not durable), and, under
// WithReplicaAcksOnClaims, behind the claims it granted. Where they did not
// acknowledge, those answers are not durable, and the granted claims are given
// back first, uncounted.
func (r *Store) claimAcks(ctx context.Context, b *beginBatch) {
	var keys []string
	var waits []int
	for i := range b.out {
		c := &b.out[i]
		if c.Err != nil {
			continue
		}
		switch c.Status {
		case consumer.StatusCompleted, consumer.StatusFailed, consumer.StatusExhausted:
		case consumer.StatusAcquired, consumer.StatusTakenOver:
			if !r.acks.claims {
				continue
			}
		default:
			continue
		}
		waits = append(waits, i)
		keys = append(keys, c.Ref)
	}
	if len(waits) == 0 {
		return
	}
	errs := r.awaitReplicas(ctx, keys, true)
	var back []consumer.Owned
	for j, i := range waits {
		if errs[j] == nil {
			continue
		}
		if st := b.out[i].Status; st == consumer.StatusAcquired || st == consumer.StatusTakenOver {
			c := &b.claims[i]
			back = append(back, consumer.Owned{Key: c.Key, Ref: b.out[i].Ref, Owner: c.Owner, Fence: b.out[i].Fence})
		}
	}
	if len(back) > 0 {
		_ = r.owned(ctx, "release", back) // the claims lapse with their leases if this fails too
	}
	for j, i := range waits {
		if errs[j] != nil {
			b.out[i] = consumer.ClaimReply{Ref: b.out[i].Ref, Err: &consumer.StoreError{Op: "begin", Err: errs[j]}}
		}
	}
}
