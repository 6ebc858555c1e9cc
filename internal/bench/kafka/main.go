// Command kafka measures the Kafka adapter in one run on one in-process kfake
// cluster and one private redis-server (make bench-kafka), three repetitions of
// interleaved lanes, each lane with its own consumer group and record prefix:
//
//   - raw franz-go: a group consumer, a no-op per record, a synchronous commit per
//     poll (what consuming costs without any idempotency);
//   - ExecuteBatch alone: the same keys through consumer.ExecuteBatch, B=100, read
//     from memory (what the engine costs without Kafka);
//   - adapter, no-op handler (key ordering, defaults);
//   - hand-rolled: a group consumer doing SET NX PX, the handler and SET per record,
//     one record at a time (what users write without idemkit);
//   - adapter, 2 ms handler (a database write), in-flight 256;
//   - stall: the same with one record's handler blocked for 5 s: the time until
//     every other record settled, against the 2 ms lane's.
//
// CPU is per message, from /proc: this process (client, kfake broker and adapter
// together) and redis-server.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit/adapters/kafka"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/benchkit"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// counter counts the records the adapter settled: an observer of its store.
type counter struct{ n atomic.Int64 }

func (o *counter) OnOutcome(e consumer.OutcomeEvent) {
	if e.Action == consumer.Ack {
		o.n.Add(1)
	}
}

func main() {
	n := flag.Int("n", 20000, "records per lane")
	parts := flag.Int("partitions", 8, "partitions")
	reps := flag.Int("reps", 3, "repetitions")
	stall := flag.Duration("stall", 5*time.Second, "how long the stalled record's handler blocks")
	flag.Parse()
	if err := run(*n, int32(*parts), *reps, *stall); err != nil {
		fmt.Fprintln(os.Stderr, "bench-kafka:", err)
		os.Exit(1)
	}
}

type bench struct {
	brokers []string
	rdb     *redis.Client
	env     benchkit.Env
	n       int
	seq     int
}

// fresh names a group and a record prefix no lane used before.
func (b *bench) fresh(lane string) (group, prefix string) {
	b.seq++
	id := lane + "-" + strconv.Itoa(b.seq) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	return "g-" + id, "idemkit-bench-kafka-" + id
}

func run(n int, parts int32, reps int, stall time.Duration) error {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, "bench", "bench.dlq"))
	if err != nil {
		return err
	}
	defer cluster.Close()
	b := &bench{brokers: cluster.ListenAddrs(), n: n}
	if err := produce(b.brokers, n); err != nil {
		return err
	}
	addr, _, stop, err := testenv.RedisForTool()
	if err != nil {
		return err
	}
	defer stop()
	calls := &testenv.CommandCounter{}
	b.rdb = redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 64})
	defer b.rdb.Close()
	b.rdb.AddHook(calls)
	_, pid := benchkit.RedisInfo(context.Background(), b.rdb)
	b.env = benchkit.Env{ServerPid: pid, Calls: calls}

	fmt.Printf("idemkit Kafka bench: %d records in %d partitions (kfake in-process), private redis-server, %d repetitions\n", n, parts, reps)
	for r := 1; r <= reps; r++ {
		lanes := map[string]*benchkit.Lane{}
		lane := func(name string) *benchkit.Lane {
			l := &benchkit.Lane{Name: name}
			lanes[name] = l
			return l
		}
		raw, batch, noop, hand := lane("raw franz-go, commit per poll"), lane("ExecuteBatch alone, B=100"),
			lane("adapter, no-op handler"), lane("hand-rolled SET NX PX + SET")
		slow, stalled := lane("adapter, 2 ms handler, in-flight 256"), lane("adapter, 2 ms, one record stalls")
		share := lane(shareLane(4, 500))
		var stallOthers time.Duration
		steps := []struct {
			l  *benchkit.Lane
			fn func() error
		}{
			{raw, func() error { return b.raw() }},
			{batch, func() error { return b.batch() }},
			{noop, func() error { return b.adapter(0, "", 0) }},
			{hand, func() error { return b.handRolled() }},
			{slow, func() error { return b.adapter(2*time.Millisecond, "", 0) }},
			{stalled, func() error {
				d, err := b.stalled(stall)
				stallOthers = d
				return err
			}},
			{share, func() error { return b.share(2*time.Millisecond, 4, 500) }},
		}
		for _, s := range steps {
			if err := b.env.Measure(s.l, n, s.fn); err != nil {
				return err
			}
		}
		fmt.Printf("\nrepetition %d\n", r)
		benchkit.Table(os.Stdout, raw, raw, batch, noop, hand, slow, stalled, share)
		want := min(20000, 0.8*min(256/0.002, noop.Rate()))
		fmt.Printf("\n  2 ms handler >= %.0f records/s (20,000, or 0.8 of in-flight/2 ms or of no-op):  %.0f  %s\n",
			want, slow.Rate(), benchkit.Verdict(slow.Rate() >= want))
		fmt.Printf("  share group, 2 ms handler >= 20,000 records/s:            %.0f  %s (%.2fx the classic 2 ms lane)\n",
			share.Rate(), benchkit.Verdict(share.Rate() >= 20000), share.Rate()/slow.Rate())
		fmt.Printf("  no-op adapter >= 0.9x ExecuteBatch alone:                 %.2fx  %s\n",
			noop.Rate()/batch.Rate(), benchkit.Verdict(noop.Rate() >= 0.9*batch.Rate()))
		fmt.Printf("  hand-rolled lane vs the adapter:                          %.2fx\n", hand.Rate()/noop.Rate())
		ratio := stallOthers.Seconds() / slow.Elapsed.Seconds()
		fmt.Printf("  stall: the others settled in %v against %v without it:  %.2fx  %s (<= 1.2x)\n",
			stallOthers.Round(time.Millisecond), slow.Elapsed.Round(time.Millisecond), ratio, benchkit.Verdict(ratio <= 1.2))
	}
	return nil
}

func produce(brokers []string, n int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("bench"), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	value := []byte(`{"order":42,"amount":1999}`)
	errs := make(chan error, 1)
	for i := 0; i < n; i++ {
		id := []byte("evt-" + strconv.Itoa(i))
		cl.Produce(context.Background(), &kgo.Record{Key: id, Value: value,
			Headers: []kgo.RecordHeader{{Key: kafka.DefaultKeyHeader, Value: id}}}, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	}
	if err := cl.Flush(context.Background()); err != nil {
		return err
	}
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// poll consumes the topic with a fresh group, calling each for every record and
// committing after every poll.
func (b *bench) poll(group string, each func(*kgo.Record) error) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...), kgo.ConsumerGroup(group), kgo.ConsumeTopics("bench"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll())
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	seen := 0
	for seen < b.n {
		f := cl.PollRecords(ctx, 1000)
		if err := ctx.Err(); err != nil {
			return err
		}
		var ferr error
		f.EachRecord(func(rec *kgo.Record) {
			seen++
			if ferr == nil {
				ferr = each(rec)
			}
		})
		if ferr != nil {
			return ferr
		}
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			return err
		}
		cl.AllowRebalance()
	}
	return nil
}

func (b *bench) raw() error {
	group, _ := b.fresh("raw")
	return b.poll(group, func(*kgo.Record) error { return nil })
}

// handRolled is the idempotency users write by hand: a marker set if absent with a
// lease, the handler, the marker overwritten as done; one record at a time.
func (b *bench) handRolled() error {
	group, prefix := b.fresh("hand")
	ctx := context.Background()
	return b.poll(group, func(rec *kgo.Record) error {
		key := prefix + ":" + string(rec.Key)
		ok, err := b.rdb.SetNX(ctx, key, "started", 30*time.Second).Result()
		if err != nil || !ok {
			return err
		}
		return b.rdb.Set(ctx, key, "done", 24*time.Hour).Err()
	})
}

func (b *bench) store(prefix, scope string, obs ...consumer.Observer) (*redisstore.Store, error) {
	s, err := redisstore.NewStore(b.rdb, consumer.WithPrefix(prefix), consumer.WithScope(scope), consumer.WithObserver(obs...))
	if err != nil {
		return nil, err
	}
	return s, s.Load(context.Background())
}

func (b *bench) batch() error {
	_, prefix := b.fresh("batch")
	s, err := b.store(prefix, "bench")
	if err != nil {
		return err
	}
	ctx := context.Background()
	value := []byte(`{"order":42,"amount":1999}`)
	noop := func(context.Context, int, consumer.BatchItem) (struct{}, error) { return struct{}{}, nil }
	items := make([]consumer.BatchItem, 0, 100)
	for i := 0; i < b.n; i += 100 {
		items = items[:0]
		for j := i; j < min(i+100, b.n); j++ {
			items = append(items, consumer.BatchItem{Key: consumer.Key("evt-" + strconv.Itoa(j)), Payload: value})
		}
		for _, r := range consumer.ExecuteBatch(ctx, s, items, noop) {
			if r.Outcome != consumer.Success {
				return fmt.Errorf("batch: %v %v", r.Outcome, r.Err)
			}
		}
	}
	return nil
}

// adapter runs the topic through the adapter with a fresh group; the handler waits
// wait, and the record keyed stallKey blocks for stall.
func (b *bench) adapter(wait time.Duration, stallKey string, stall time.Duration) error {
	_, err := b.adapterUntil(wait, stallKey, stall, int64(b.n))
	return err
}

func (b *bench) adapterUntil(wait time.Duration, stallKey string, stall time.Duration, until int64) (time.Duration, error) {
	group, prefix := b.fresh("adapter")
	seen := &counter{}
	s, err := b.store(prefix, group, seen)
	if err != nil {
		return 0, err
	}
	c, err := kafka.New(s, []kgo.Opt{kgo.SeedBrokers(b.brokers...), kgo.ConsumerGroup(group), kgo.ConsumeTopics("bench"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())},
		func(ctx context.Context, rec *kgo.Record) (struct{}, error) {
			d := wait
			if stallKey != "" && string(rec.Key) == stallKey {
				d = stall
			}
			if d > 0 {
				t := time.NewTimer(d)
				defer t.Stop()
				select {
				case <-t.C:
				case <-ctx.Done():
				}
			}
			return struct{}{}, nil
		}, kafka.WithShutdownGrace(stall+time.Second))
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- c.Run(ctx) }()
	var reached time.Duration
	for seen.n.Load() < int64(b.n) {
		if reached == 0 && seen.n.Load() >= until {
			reached = time.Since(start)
		}
		if time.Since(start) > 5*time.Minute {
			cancel()
			<-done
			return 0, fmt.Errorf("only %d of %d settled", seen.n.Load(), b.n)
		}
		time.Sleep(time.Millisecond)
	}
	if reached == 0 {
		reached = time.Since(start)
	}
	cancel()
	return reached, <-done
}

// stalled is the 2 ms lane with one record blocked for stall; it returns when
// every other record had settled.
func (b *bench) stalled(stall time.Duration) (time.Duration, error) {
	return b.adapterUntil(2*time.Millisecond, "evt-"+strconv.Itoa(b.n/3), stall, int64(b.n-1))
}
