// Command durability measures what waiting for replicas costs (make
// bench-durability): a private redis-server primary with one private replica on
// this machine, the Redis store with and without redisstore.WithReplicaAcks(1,
// ...), in one run, lanes interleaved in slices, three repetitions:
//
//   - ExecuteIdempotently, one message at a time: default (the primary's answer),
//     and WithReplicaAcks(1, 1s) (every completion waits for the replica);
//   - ExecuteBatch B=100: default, WithReplicaAcks(1, 1s), and
//     WithReplicaAcks(1, 1s) + WithReplicaAcksOnClaims (claims wait too).
//
// Each lane is shown as a ratio to its default lane, with this process's CPU per
// message (Go), the primary's and the replica's (from /proc/<pid>/stat),
// allocations, and commands per message counted on the client.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/benchkit"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
)

func main() {
	single := flag.Int("n", 4000, "messages per repetition for the one-at-a-time lanes")
	batched := flag.Int("batch-n", 40000, "messages per repetition for the batch lanes")
	reps := flag.Int("reps", 3, "repetitions")
	flag.Parse()
	if err := run(*single, *batched, *reps); err != nil {
		fmt.Fprintln(os.Stderr, "bench-durability:", err)
		os.Exit(1)
	}
}

const (
	batchSize = 100
	slices    = 10
	waitFor   = time.Second
)

func run(n, bn, reps int) error {
	ctx := context.Background()
	primary, err := testenv.StartRedis()
	if err != nil {
		return fmt.Errorf("no redis-server for the primary: %w", err)
	}
	defer primary.Close()
	replica, err := testenv.StartRedis("--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	if err != nil {
		return fmt.Errorf("no redis-server for the replica: %w", err)
	}
	defer replica.Close()
	admin := redis.NewClient(&redis.Options{Addr: primary.Addr})
	defer admin.Close()
	replicaAdmin := redis.NewClient(&redis.Options{Addr: replica.Addr})
	defer replicaAdmin.Close()
	if err := synced(ctx, admin); err != nil {
		return err
	}
	version, pid := benchkit.RedisInfo(ctx, admin)
	_, replicaPid := benchkit.RedisInfo(ctx, replicaAdmin)

	client := redis.NewClient(&redis.Options{Addr: primary.Addr, ContextTimeoutEnabled: true, PoolSize: 8})
	defer client.Close()
	cnt := &testenv.CommandCounter{}
	client.AddHook(cnt)
	runID := strconv.FormatInt(time.Now().UnixNano(), 36)
	newStore := func(extra ...consumer.Option) (*redisstore.Store, error) {
		opts := append([]consumer.Option{consumer.WithPrefix("idemkit-durability-" + runID), consumer.WithScope("bench"),
			redisstore.WithEvictionCheck(redisstore.EvictionIgnore)}, extra...)
		s, err := redisstore.NewStore(client, opts...)
		if err != nil {
			return nil, err
		}
		return s, s.Load(ctx)
	}
	plain, err := newStore()
	if err != nil {
		return err
	}
	acked, err := newStore(redisstore.WithReplicaAcks(1, waitFor))
	if err != nil {
		return err
	}
	claims, err := newStore(redisstore.WithReplicaAcks(1, waitFor), redisstore.WithReplicaAcksOnClaims())
	if err != nil {
		return err
	}
	env := benchkit.Env{ServerPid: pid, Calls: cnt}
	fmt.Printf("idemkit bench-durability: Redis %s, a private primary and one private replica on this machine, "+
		"no-op handler, %d repetitions\n", version, reps)
	for rep := 1; rep <= reps; rep++ {
		if err := repetition(ctx, env, replicaPid, runID, rep, n, bn, plain, acked, claims); err != nil {
			return err
		}
	}
	return nil
}

// synced waits until the replica has caught up with the primary.
func synced(ctx context.Context, c *redis.Client) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if got, err := testenv.ReplicasAcked(ctx, c, "idemkit-bench:synced", 1, 100*time.Millisecond); err == nil && got >= 1 {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("the replica did not catch up with the primary within 30s")
}

// lane is a benchkit lane with the replica's CPU beside it.
type lane struct {
	benchkit.Lane
	replicaCPU time.Duration
}

func repetition(ctx context.Context, env benchkit.Env, replicaPid int, runID string, rep, n, bn int,
	plain, acked, claims *redisstore.Store) error {
	single := []*lane{{Lane: benchkit.Lane{Name: "ExecuteIdempotently, default"}},
		{Lane: benchkit.Lane{Name: "ExecuteIdempotently, WithReplicaAcks(1)"}}}
	batch := []*lane{{Lane: benchkit.Lane{Name: fmt.Sprintf("ExecuteBatch B=%d, default", batchSize)}},
		{Lane: benchkit.Lane{Name: fmt.Sprintf("ExecuteBatch B=%d, WithReplicaAcks(1)", batchSize)}},
		{Lane: benchkit.Lane{Name: fmt.Sprintf("ExecuteBatch B=%d, + OnClaims", batchSize)}}}
	singleStores := []*redisstore.Store{plain, acked}
	batchStores := []*redisstore.Store{plain, acked, claims}
	noop := func(context.Context) (string, error) { return "ok", nil }
	noopBatch := func(context.Context, int, consumer.BatchItem) (string, error) { return "ok", nil }
	per, bper := n/slices, bn/slices/batchSize*batchSize
	measure := func(l *lane, msgs int, body func() error) error {
		r0 := benchkit.CPUTime(replicaPid)
		err := env.Measure(&l.Lane, msgs, body)
		l.replicaCPU += benchkit.CPUTime(replicaPid) - r0
		return err
	}
	for s := 0; s < slices; s++ {
		for k, l := range single {
			st, ks := singleStores[k], keys(runID, fmt.Sprintf("s%d-%d-%d", k, rep, s), per)
			if err := measure(l, per, func() error {
				for _, key := range ks {
					if r := consumer.ExecuteIdempotently(ctx, st, key, nil, noop); r.Outcome != consumer.Success {
						return fmt.Errorf("%v %v", r.Outcome, r.Err)
					}
				}
				return nil
			}); err != nil {
				return err
			}
		}
		for k, l := range batch {
			st, ks := batchStores[k], keys(runID, fmt.Sprintf("b%d-%d-%d", k, rep, s), bper)
			if err := measure(l, bper, func() error {
				items := make([]consumer.BatchItem, batchSize)
				for lo := 0; lo < len(ks); lo += batchSize {
					for i := range items {
						items[i] = consumer.BatchItem{Key: ks[lo+i]}
					}
					for _, r := range consumer.ExecuteBatch(ctx, st, items, noopBatch) {
						if r.Outcome != consumer.Success {
							return fmt.Errorf("%v %v", r.Outcome, r.Err)
						}
					}
				}
				return nil
			}); err != nil {
				return err
			}
		}
	}
	fmt.Printf("\nrepetition %d\n", rep)
	table(single)
	table(batch)
	return nil
}

// table prints lanes, each rate and CPU as a ratio to the first lane's.
func table(lanes []*lane) {
	ref := lanes[0]
	fmt.Printf("%-42s %8s %9s %7s %9s %10s %8s %12s %8s %10s %8s\n", "lane", "messages", "msgs/s", "vs ref",
		"calls/msg", "Go us/msg", "vs ref", "primary us", "vs ref", "replica us", "allocs")
	for _, l := range lanes {
		fmt.Printf("%-42s %8d %9.0f %6.2fx %9.3f %10.2f %7.2fx %12.2f %7.2fx %10.2f %8.1f\n", l.Name, l.Msgs, l.Rate(),
			l.Rate()/ref.Rate(), l.CallsPerMsg(), l.PerMsg(l.GoCPU), ratio(l.PerMsg(l.GoCPU), ref.PerMsg(ref.GoCPU)),
			l.PerMsg(l.ServerCPU), ratio(l.PerMsg(l.ServerCPU), ref.PerMsg(ref.ServerCPU)), l.PerMsg(l.replicaCPU),
			l.AllocsPerMsg())
	}
}

func keys(runID, tag string, n int) []consumer.Key {
	out := make([]consumer.Key, n)
	for i := range out {
		out[i] = consumer.Key(runID + "-" + tag + "-" + strconv.Itoa(i))
	}
	return out
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
