// Command kafka measures the Kafka adapter against raw franz-go group consumption
// in one run on one in-process kfake cluster (make bench-kafka): the same records
// in the same partitions, a no-op handler, each path with its own consumer group.
//
//   - raw: kgo group consumer, PollRecords, then a synchronous commit per poll
//     (what a careful consumer without idemkit does);
//   - adapter: kafka.New over a Redis store, every record through the idempotent
//     batch path, committed after settling.
//
// Redis is a private redis-server unless IDEMKIT_REDIS_ADDR names one.
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
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

type outcomes struct{ settled atomic.Int64 }

func (o *outcomes) OnOutcome(*kgo.Record, consumer.Outcome) { o.settled.Add(1) }

func main() {
	n := flag.Int("n", 100000, "records")
	parts := flag.Int("partitions", 8, "partitions")
	flag.Parse()
	if err := run(*n, int32(*parts)); err != nil {
		fmt.Fprintln(os.Stderr, "bench-kafka:", err)
		os.Exit(1)
	}
}

func run(n int, parts int32) error {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, "bench", "bench.dlq"))
	if err != nil {
		return err
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	if err := produce(brokers, n); err != nil {
		return err
	}

	addr, _, stop, err := testenv.RedisForTool()
	if err != nil {
		return err
	}
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	calls := &testenv.CommandCounter{}
	rdb.AddHook(calls)

	const rounds = 3 // interleaved, each with fresh groups, so noise falls on both
	var rawTime, adTime time.Duration
	for r := 0; r < rounds; r++ {
		d, err := raw(brokers, fmt.Sprint("raw-", r), n)
		if err != nil {
			return err
		}
		rawTime += d
		d, err = adapter(brokers, rdb, fmt.Sprint("adapter-", r), n)
		if err != nil {
			return err
		}
		adTime += d
	}
	total := float64(n * rounds)
	rawRate, adRate := total/rawTime.Seconds(), total/adTime.Seconds()
	fmt.Printf("idemkit Kafka bench: %d records in %d partitions, kfake in-process, no-op handler, %d rounds\n\n", n, parts, rounds)
	fmt.Printf("%-44s %12s %10s %18s\n", "path", "records/s", "vs raw", "Redis calls/record")
	fmt.Printf("%-44s %12.0f %9.2fx %18s\n", "raw franz-go group, sync commit per poll", rawRate, 1.0, "-")
	fmt.Printf("%-44s %12.0f %9.2fx %18.4f\n", "idemkit adapter (batch path per partition)", adRate, adRate/rawRate,
		float64(calls.Load())/total)
	verdict := "met"
	if adRate < 0.6*rawRate {
		verdict = "MISSED"
	}
	fmt.Printf("\nadapter >= 0.6x raw: %.2fx %s\n", adRate/rawRate, verdict)
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

func raw(brokers []string, group string, n int) (time.Duration, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(group), kgo.ConsumeTopics("bench"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll())
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	seen := 0
	for seen < n {
		f := cl.PollRecords(ctx, 1000)
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		f.EachRecord(func(*kgo.Record) { seen++ }) // the no-op handler
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			return 0, err
		}
		cl.AllowRebalance()
	}
	return time.Since(start), nil
}

func adapter(brokers []string, rdb *redis.Client, group string, n int) (time.Duration, error) {
	store, err := consumer.NewRedisStore(rdb, consumer.WithPrefix("idemkit-bench-kafka-"+strconv.FormatInt(time.Now().UnixNano(), 36)),
		consumer.WithScope(group))
	if err != nil {
		return 0, err
	}
	if err := store.Load(context.Background()); err != nil {
		return 0, err
	}
	seen := &outcomes{}
	c, err := kafka.New(store, []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(group), kgo.ConsumeTopics("bench"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())},
		func(ctx context.Context, rec *kgo.Record) (struct{}, error) { return struct{}{}, nil },
		kafka.WithHooks(seen), kafka.WithMaxPollRecords(1000))
	if err != nil {
		return 0, err
	}
	return testenv.TimeUntil(c.Run, seen.settled.Load, int64(n), 5*time.Minute)
}
