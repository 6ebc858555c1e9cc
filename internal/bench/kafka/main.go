// Command kafka measures the Kafka adapter in one run on one in-process kfake
// cluster and one private redis-server (make bench-kafka), three repetitions of
// interleaved lanes, each lane with its own consumer group and record prefix:
//
//   - raw franz-go: a group consumer, a no-op per record, a synchronous commit per
//     poll (what consuming costs without any idempotency);
//   - ExecuteBatch alone: the same keys through consumer.ExecuteBatch, B=100, read
//     from memory (what the engine costs without Kafka);
//   - Pipeline alone: the same keys submitted one by one to a consumer.Pipeline
//     with the adapter's default window, read from memory (what the adapter's
//     engine costs without Kafka);
//   - adapter, no-op handler (key ordering, defaults);
//   - hand-rolled: a group consumer doing SET NX PX, the handler and SET per record,
//     one record at a time (what users write without idemkit);
//   - adapter, 2 ms handler (a database write), the adapter's defaults, and again
//     with the window of 256 the adapter had before;
//   - stall: the same with one record's handler blocked for 5 s: the time until
//     every other record settled, against the 2 ms lane's.
//
// CPU is per message: this process's (client, kfake broker and adapter together)
// from getrusage, to the microsecond, and redis-server's from /proc. The adapter's own cost is the no-op adapter lane's
// Go CPU minus the ExecuteBatch lane's and the raw lane's (what Kafka and the
// engine cost without the adapter), and, beside it, minus the Pipeline lane's
// instead of ExecuteBatch's (what the adapter adds to the engine it runs on).
//
// This machine's speed drifts (up to 2x between runs seconds apart), and a
// difference of three lanes shows it undamped: a raw lane at 6.7 us per record
// instead of 1 makes the adapter's own cost negative. So each repetition runs the
// lanes of those differences (raw, ExecuteBatch, Pipeline, no-op adapter) in
// -rounds rounds: round 1 is their run in the table, and each further round runs
// each of them once more, back to back, in another order (the table's order
// rotated by one per round), every run the same work as the table's (a fresh
// group over the whole topic, the same keys). The differences are taken within
// each round and the figure judged is their median over rounds; the mean over
// rounds and the table's one-run difference are printed beside it, and every
// round's per-lane figure too.
//
// -lanes runs some lanes only; -cpuprofile and -memprofile write a CPU and an
// allocation profile of the lanes run (make profile-kafka: the no-op adapter lane).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	only := flag.String("lanes", "all", "lanes to run, comma-separated: "+strings.Join(laneIDs, ","))
	inFlight := flag.Int("inflight", 0, "the adapter lanes' WithInFlight and WithConcurrency (0: the adapter's defaults)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the lanes run to this file")
	memProfile := flag.String("memprofile", "", "write an allocation profile of the lanes run to this file")
	rounds := flag.Int("rounds", 5, "rounds per repetition of the lanes whose differences make the adapter's own cost (raw, batch, pipeline, noop); 1: one run each")
	flag.Parse()
	o := opts{inFlight: *inFlight, n: *n, parts: int32(*parts), reps: *reps, stall: *stall, rounds: *rounds,
		cpuProfile: *cpuProfile, memProfile: *memProfile}
	if *inFlight < 0 {
		fmt.Fprintln(os.Stderr, "bench-kafka: -inflight: give 0 for the defaults or a window of at least 1")
		os.Exit(2)
	}
	if *rounds < 1 {
		fmt.Fprintf(os.Stderr, "bench-kafka: -rounds %d: give at least 1 (1: each lane runs once)\n", *rounds)
		os.Exit(2)
	}
	if *only != "all" {
		o.lanes = strings.Split(*only, ",")
		for _, l := range o.lanes {
			if !slices.Contains(laneIDs, l) {
				fmt.Fprintf(os.Stderr, "bench-kafka: -lanes: unknown lane %q: give some of %s\n", l, strings.Join(laneIDs, ","))
				os.Exit(2)
			}
		}
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench-kafka:", err)
		os.Exit(1)
	}
}

type bench struct {
	brokers  []string
	rdb      *redis.Client
	env      benchkit.Env
	n        int
	seq      int
	written  []string // the record prefixes named since the last lane's records were deleted
	inFlight int      // the adapter lanes' window and handlers; 0: the defaults
}

// fresh names a group and a record prefix no lane used before.
func (b *bench) fresh(lane string) (group, prefix string) {
	b.seq++
	id := lane + "-" + strconv.Itoa(b.seq) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	prefix = "idemkit-bench-kafka-" + id
	b.written = append(b.written, prefix)
	return "g-" + id, prefix
}

// laneIDs name the lanes for -lanes, in the order they run.
var laneIDs = []string{"raw", "batch", "pipeline", "noop", "hand", "slow", "slow256", "stall", "share"}

type opts struct {
	n                      int
	parts                  int32
	reps                   int
	stall                  time.Duration
	rounds                 int      // runs of the compared lanes per repetition
	lanes                  []string // nil: all
	inFlight               int      // the adapter lanes' window and handlers; 0: the defaults
	cpuProfile, memProfile string
}

func (o opts) runs(id string) bool { return o.lanes == nil || slices.Contains(o.lanes, id) }

func run(o opts) error {
	n, parts, reps, stall := o.n, o.parts, o.reps, o.stall
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, "bench", "bench.dlq"))
	if err != nil {
		return err
	}
	defer cluster.Close()
	b := &bench{brokers: cluster.ListenAddrs(), n: n, inFlight: o.inFlight}
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

	stopProfiles, err := startProfiles(o.cpuProfile, o.memProfile)
	if err != nil {
		return err
	}
	fmt.Printf("idemkit Kafka bench: %d records in %d partitions (kfake in-process), private redis-server, %d repetitions\n", n, parts, reps)
	for r := 1; r <= reps; r++ {
		raw, batch, pipe := &benchkit.Lane{Name: "raw franz-go, commit per poll"}, &benchkit.Lane{Name: "ExecuteBatch alone, B=100"},
			&benchkit.Lane{Name: "Pipeline alone, window " + strconv.Itoa(b.window())}
		noop, hand := &benchkit.Lane{Name: "adapter, no-op handler"}, &benchkit.Lane{Name: "hand-rolled SET NX PX + SET"}
		slow, stalled := &benchkit.Lane{Name: "adapter, 2 ms handler, defaults"}, &benchkit.Lane{Name: "adapter, 2 ms, one record stalls"}
		slow256 := &benchkit.Lane{Name: "adapter, 2 ms handler, in-flight 256"}
		share := &benchkit.Lane{Name: shareLane(4, 500)}
		var stallOthers time.Duration
		steps := []struct {
			id string
			l  *benchkit.Lane
			fn func() error
		}{
			{"raw", raw, func() error { return b.raw() }},
			{"batch", batch, func() error { return b.batch() }},
			{"pipeline", pipe, func() error { return b.pipeline() }},
			{"noop", noop, func() error { return b.adapter(0, "", 0) }},
			{"hand", hand, func() error { return b.handRolled() }},
			{"slow", slow, func() error { return b.adapter(2*time.Millisecond, "", 0) }},
			{"slow256", slow256, func() error {
				return b.withWindow(256, func() error { return b.adapter(2*time.Millisecond, "", 0) })
			}},
			{"stall", stalled, func() error {
				d, err := b.stalled(stall)
				stallOthers = d
				return err
			}},
			{"share", share, func() error { return b.share(2*time.Millisecond, 4, 500) }},
		}
		var ran []*benchkit.Lane
		// Round 1 of the compared lanes is their run here, one after the other in
		// the order of the table.
		rs := newRounds(o)
		for _, s := range steps {
			if !o.runs(s.id) {
				continue
			}
			if err := b.measure(s.l, s.fn); err != nil {
				return err
			}
			rs.add(0, s.id, s.l)
			ran = append(ran, s.l)
		}
		if err := b.moreRounds(rs); err != nil {
			return err
		}
		fmt.Printf("\nrepetition %d\n", r)
		benchkit.Table(os.Stdout, ran[0], ran...)
		verdicts(o, raw, batch, pipe, noop, hand, slow, slow256, stallOthers)
		rs.print(os.Stdout)
		if o.runs("share") && o.runs("slow") {
			fmt.Printf("  share group, 2 ms handler >= 20,000 records/s:              %.0f  %s (%.2fx the classic 2 ms lane)\n",
				share.Rate(), benchkit.Verdict(share.Rate() >= 20000), share.Rate()/slow.Rate())
		}
	}
	return stopProfiles()
}

// verdicts prints the targets of the lanes run against the reference lanes of the
// same repetition.
func verdicts(o opts, raw, batch, pipe, noop, hand, slow, slow256 *benchkit.Lane, stallOthers time.Duration) {
	fmt.Println()
	if o.runs("noop") && o.runs("batch") {
		fmt.Printf("  no-op adapter >= 0.9x ExecuteBatch alone (msgs/s):          %.2fx  %s\n",
			noop.Rate()/batch.Rate(), benchkit.Verdict(noop.Rate() >= 0.9*batch.Rate()))
	}
	if o.runs("noop") && o.runs("pipeline") {
		fmt.Printf("  no-op adapter vs Pipeline alone (msgs/s):                   %.2fx\n", noop.Rate()/pipe.Rate())
	}
	if o.runs("noop") && o.runs("batch") && o.runs("raw") {
		own := noop.PerMsg(noop.GoCPU) - batch.PerMsg(batch.GoCPU) - raw.PerMsg(raw.GoCPU)
		fmt.Printf("  adapter's own Go CPU, one run each (no-op - ExecuteBatch - raw) <= 3 us:  %.2f us  %s\n", own, benchkit.Verdict(own <= 3))
	}
	if o.runs("noop") && o.runs("pipeline") && o.runs("raw") {
		own := noop.PerMsg(noop.GoCPU) - pipe.PerMsg(pipe.GoCPU) - raw.PerMsg(raw.GoCPU)
		fmt.Printf("  adapter over its engine, one run each (no-op - Pipeline - raw):  %.2f us\n", own)
	}
	if o.runs("slow") {
		fmt.Printf("  2 ms handler >= 40,000 records/s at the default window:     %.0f  %s\n",
			slow.Rate(), benchkit.Verdict(slow.Rate() >= 40000))
	}
	if o.runs("slow") && o.runs("slow256") {
		fmt.Printf("  2 ms handler, default window vs in-flight 256 (msgs/s):     %.2fx\n", slow.Rate()/slow256.Rate())
	}
	if o.runs("hand") && o.runs("noop") {
		fmt.Printf("  hand-rolled lane vs the adapter:                            %.2fx\n", hand.Rate()/noop.Rate())
	}
	if o.runs("stall") && o.runs("slow") {
		ratio := stallOthers.Seconds() / slow.Elapsed.Seconds()
		fmt.Printf("  stall: the others settled in %v against %v without it:  %.2fx  %s (<= 1.2x)\n",
			stallOthers.Round(time.Millisecond), slow.Elapsed.Round(time.Millisecond), ratio, benchkit.Verdict(ratio <= 1.2))
	}
}

// measure runs fn, one lane's run over the topic, adds what it cost to l, and
// deletes the records the lane wrote. The lane's Go CPU is getrusage's, to the
// microsecond (benchkit.CPUTime): the adapter's own cost is a difference of three
// lanes. Only the lane's body is timed, as Measure times it.
func (b *bench) measure(l *benchkit.Lane, fn func() error) error {
	if err := b.env.Measure(l, b.n, fn); err != nil {
		return err
	}
	// The lane's records go, unmeasured, so that every lane starts from the same
	// keyspace (see benchkit.Forget); only its own, should another run share the
	// server (IDEMKIT_REDIS_ADDR).
	for _, prefix := range b.written {
		if _, err := benchkit.Forget(context.Background(), b.rdb, prefix+":*"); err != nil {
			return err
		}
	}
	b.written = b.written[:0]
	return nil
}

// startProfiles starts a CPU profile into cpu and samples every allocation for a
// profile into mem (either may be empty); the function it returns writes them.
func startProfiles(cpu, mem string) (func() error, error) {
	var cf *os.File
	if cpu != "" {
		f, err := os.Create(cpu)
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, err
		}
		cf = f
	}
	if mem != "" {
		runtime.MemProfileRate = 512 // fine enough to count allocations per record
	}
	return func() error {
		if cf != nil {
			pprof.StopCPUProfile()
			if err := cf.Close(); err != nil {
				return err
			}
		}
		if mem == "" {
			return nil
		}
		f, err := os.Create(mem)
		if err != nil {
			return err
		}
		runtime.GC()
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}, nil
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

// pipeline submits the same keys one by one to a Pipeline with the adapter's
// window and handlers (b.window() each), a no-op handler, and waits for every
// Done: the adapter's engine without Kafka.
func (b *bench) pipeline() error {
	_, prefix := b.fresh("pipeline")
	s, err := b.store(prefix, "bench")
	if err != nil {
		return err
	}
	ctx := context.Background()
	p, err := consumer.NewPipeline[struct{}](ctx, s, consumer.WithInFlight(b.window()), consumer.WithConcurrency(b.window()))
	if err != nil {
		return err
	}
	value := []byte(`{"order":42,"amount":1999}`)
	var bad atomic.Int64
	var left sync.WaitGroup
	left.Add(b.n)
	run := func(context.Context) (struct{}, error) { return struct{}{}, nil }
	done := func(r consumer.Result[struct{}]) {
		if r.Outcome != consumer.Success {
			bad.Add(1)
		}
		left.Done()
	}
	for i := 0; i < b.n; i++ {
		if err := p.Submit(ctx, consumer.PipelineItem[struct{}]{Key: consumer.Key("evt-" + strconv.Itoa(i)), Payload: value,
			Run: run, Done: done}); err != nil {
			return err
		}
	}
	left.Wait()
	if err := p.Shutdown(ctx); err != nil {
		return err
	}
	if n := bad.Load(); n > 0 {
		return fmt.Errorf("pipeline: %d of %d not SUCCESS", n, b.n)
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
		}, b.adapterOpts(kafka.WithShutdownGrace(stall+time.Second))...)
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

// defaultWindow is the adapter's default WithInFlight and WithConcurrency.
const defaultWindow = 1024

// window is the adapter lanes' in-flight window and handlers.
func (b *bench) window() int {
	if b.inFlight > 0 {
		return b.inFlight
	}
	return defaultWindow
}

// withWindow runs fn with the adapter lanes' window and handlers set to n.
func (b *bench) withWindow(n int, fn func() error) error {
	was := b.inFlight
	b.inFlight = n
	defer func() { b.inFlight = was }()
	return fn()
}

// adapterOpts adds -inflight's window and handlers to opts.
func (b *bench) adapterOpts(opts ...kafka.Option) []kafka.Option {
	if b.inFlight > 0 {
		opts = append(opts, kafka.WithInFlight(b.inFlight), kafka.WithConcurrency(b.inFlight))
	}
	return opts
}

// stalled is the 2 ms lane with one record blocked for stall; it returns when
// every other record had settled.
func (b *bench) stalled(stall time.Duration) (time.Duration, error) {
	return b.adapterUntil(2*time.Millisecond, "evt-"+strconv.Itoa(b.n/3), stall, int64(b.n-1))
}
