// Command amqp measures the RabbitMQ worker in one run on one broker and one
// private redis-server (make bench-amqp), three repetitions of interleaved lanes,
// each on a fresh queue holding the same number of messages:
//
//   - raw, ack each: an amqp091-go manual-ack consumer acking every delivery;
//   - raw, multiple-ack: the same acking once per run of deliveries received;
//   - worker, no-op handler (this lane and the one before run twice, A B B A);
//   - hand-rolled: a consumer doing SET NX PX, the handler and SET per message, then
//     the ack (what users write without idemkit);
//   - worker, 2 ms handler (a database write), prefetch and concurrency 256;
//   - stall: the same with one message's handler blocked for 5 s: the time until
//     every other message settled, against the 2 ms lane's, which runs once before
//     and once after it (the two runs' ratio shows the machine's drift);
//   - stall, both at once: the 2 ms lane and the stall lane run at the same time,
//     each on its own queue, so that the machine's noise falls on both: the time
//     until every other message settled in the stall lane against the 2 ms lane's;
//   - ordered: the 2 ms worker ordered by a header (WithOrdering(ByKeyHeader)),
//     over 1,000 keys, against the unordered 2 ms lane;
//   - no-op, paired slices (the figure judged for the no-op target): the raw
//     multiple-ack consumer and the no-op worker in -pairs pairs of adjacent runs,
//     as the stall lanes' slices below;
//   - stall, paired slices (the figure judged): the 2 ms lane and the stall lane
//     in -pairs pairs of adjacent runs, see below.
//
// Stall isolation asks what one stalled message costs the others: behind a
// stalled delivery tag the worker can no longer ack a run of deliveries with one
// multiple-ack (AMQP has no range ack), so it acks every later delivery singly,
// in bursts that each go to the socket in one write.
// This machine's speed drifts by up to 2x within seconds: the same 2 ms lane run
// before and after the stall lane has differed 0.41-1.18x, more than the 1.2x
// target, so the one-after-the-other ratio says more about the machine than about
// the worker. Both lanes at once share the noise but also the two cores, so each
// slows the other and the ratio leans toward 1.
//
// The paired slices run each lane as the table runs it (n messages on a fresh
// queue filled right before the run, as the table's lanes are, the stalled
// message at n/3, the same handler and options), the two runs of a pair one right
// after the other, the pairs alternating which lane goes first (A B, B A, ...), so
// that a drift slower than a pair falls on both sides of its ratio and an order
// effect on both sides of the median. Each pair gives one ratio: the time until
// every other message settled in the stall lane over the time until every message
// settled in the 2 ms lane, each counted from the start of Run to the settlement
// that completed it (noted by the store's observer). The figure judged is the
// median of a repetition's pair ratios; beside it are every pair's ratio, the
// ratio of the sums, the two older figures, and per pair the CPU per message of
// this process and of all three processes and this process's write calls per
// message (the single acks show there, whatever the machine's speed does to the
// times). In the slices the stalled handler is released as soon as the others
// settled (after -stall at the latest): the part measured is the same, and a run
// does not idle through the rest of the stall.
//
// CPU per message from /proc: this process, redis-server (server us/msg) and, when
// the broker runs on this machine, beam.smp (in the paired slices from its
// threads' schedstat, in nanoseconds). The broker is IDEMKIT_AMQP_URL or
// amqp://guest:guest@127.0.0.1:5672/.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	idemamqp "github.com/idemkit/idemkit/adapters/amqp"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/benchkit"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
)

// settled counts the deliveries the worker settled: an observer of its store. It
// notes the moment the until-th settled and then closes reached.
type settled struct {
	n       atomic.Int64
	until   int64
	at      atomic.Int64 // time.Now().UnixNano() when n reached until
	reached chan struct{}
}

func newSettled(until int64) *settled {
	return &settled{until: until, reached: make(chan struct{})}
}

// storeCalls counts the claim and settle calls of every worker run: how many
// messages each call carries is what batching buys.
var storeCalls struct{ claims, settles atomic.Int64 }

func (s *settled) OnClaim(consumer.ClaimEvent)   { storeCalls.claims.Add(1) }
func (s *settled) OnSettle(consumer.SettleEvent) { storeCalls.settles.Add(1) }

func (s *settled) OnOutcome(e consumer.OutcomeEvent) {
	if e.Action == consumer.Ack && s.n.Add(1) == s.until {
		s.at.Store(time.Now().UnixNano())
		close(s.reached)
	}
}

func main() {
	n := flag.Int("n", 20000, "messages per lane")
	reps := flag.Int("reps", 3, "repetitions")
	stall := flag.Duration("stall", 5*time.Second, "how long the stalled message's handler blocks")
	pairs := flag.Int("pairs", 6, "pairs of paired slices (raw multiple-ack and no-op worker, then the 2 ms lane and the stall lane, back to back) per repetition; 0: none")
	profile := flag.String("profile", "", "profile only this lane: raw (multiple-ack), noop, ordered or stall (with -cpuprofile, -memprofile)")
	cpuprofile := flag.String("cpuprofile", "", "write the profiled lane's CPU profile here")
	memprofile := flag.String("memprofile", "", "write the profiled lane's allocation profile here")
	flag.Parse()
	var err error
	if *profile != "" {
		err = profileLane(*n, *reps, *stall, *profile, *cpuprofile, *memprofile)
	} else {
		err = run(*n, *reps, *pairs, *stall)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-amqp:", err)
		os.Exit(1)
	}
}

type bench struct {
	url    string
	conn   *amqp091.Connection
	rdb    *redis.Client
	env    benchkit.Env
	broker int // beam.smp's pid, -1 when not found
	n      int
	seq    int
}

func newBench(n int) (*bench, func(), error) {
	b := &bench{url: os.Getenv("IDEMKIT_AMQP_URL"), n: n, broker: brokerPid()}
	if b.url == "" {
		b.url = testenv.LocalAMQPURL
	}
	var err error
	if b.conn, err = amqp091.Dial(b.url); err != nil {
		return nil, nil, fmt.Errorf("no RabbitMQ at %s: %w", b.url, err)
	}
	addr, _, stop, err := testenv.RedisForTool()
	if err != nil {
		_ = b.conn.Close()
		return nil, nil, err
	}
	calls := &testenv.CommandCounter{}
	b.rdb = redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 64})
	b.rdb.AddHook(calls)
	_, pid := benchkit.RedisInfo(context.Background(), b.rdb)
	b.env = benchkit.Env{ServerPid: pid, Calls: calls}
	return b, func() { _ = b.rdb.Close(); stop(); _ = b.conn.Close() }, nil
}

// profileLane runs one lane reps times under the CPU profiler (the queues are
// filled first, out of the profile) and writes its profiles.
func profileLane(n, reps int, stall time.Duration, lane, cpu, mem string) error {
	b, done, err := newBench(n)
	if err != nil {
		return err
	}
	defer done()
	fn := map[string]func(q string) error{
		"raw":     func(q string) error { return b.raw(q, 256, true) },
		"noop":    func(q string) error { return b.worker(q, 0, "", 0) },
		"ordered": func(q string) error { return b.workerOrdered(q, 2*time.Millisecond) },
		"stall": func(q string) error {
			_, err := b.workerUntil(q, 2*time.Millisecond, "m-"+strconv.Itoa(n/3), stall, int64(n-1))
			return err
		},
	}[lane]
	if fn == nil {
		return fmt.Errorf("-profile %q: give raw (multiple-ack), noop, ordered or stall", lane)
	}
	rate := runtime.MemProfileRate
	runtime.MemProfileRate = 0 // filling the queues is not the lane's
	var queues []idemamqp.Topology
	for r := 0; r < reps; r++ {
		q, err := b.queue(lane == "ordered")
		if err != nil {
			return err
		}
		defer func() { _ = q.Delete(b.conn) }()
		queues = append(queues, q)
	}
	runtime.MemProfileRate = rate
	if cpu != "" {
		f, err := os.Create(cpu)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	l := &benchkit.Lane{Name: "profiled: " + lane}
	w0, c0, s0 := writes(), storeCalls.claims.Load(), storeCalls.settles.Load()
	defer func() {
		msgs := float64(n * reps)
		fmt.Printf("write syscalls per message: %.3f; store calls per message: claim %.4f, settle %.4f\n", float64(writes()-w0)/msgs,
			float64(storeCalls.claims.Load()-c0)/msgs, float64(storeCalls.settles.Load()-s0)/msgs)
	}()
	for _, q := range queues {
		if err := b.env.Measure(l, n, func() error { return fn(q.Queue) }); err != nil {
			pprof.StopCPUProfile()
			return err
		}
		if err := b.forget(q.Queue); err != nil { // out of the table, not of the profile: a few DEL calls
			pprof.StopCPUProfile()
			return err
		}
	}
	pprof.StopCPUProfile()
	benchkit.Table(os.Stdout, l, l)
	if mem != "" {
		f, err := os.Create(mem)
		if err != nil {
			return err
		}
		defer f.Close()
		return pprof.Lookup("allocs").WriteTo(f, 0)
	}
	return nil
}

func run(n, reps, pairs int, stall time.Duration) error {
	b, done, err := newBench(n)
	if err != nil {
		return err
	}
	defer done()

	fmt.Printf("idemkit RabbitMQ bench: %d messages per lane, private redis-server, %d repetitions\n", n, reps)
	for r := 1; r <= reps; r++ {
		var (
			lanes       []*benchkit.Lane
			stallOthers time.Duration
			slowRuns    []time.Duration // the 2 ms lane's two runs, before and after the stall lane
		)
		brokerCPU := map[*benchkit.Lane]time.Duration{}
		lane := func(name string) *benchkit.Lane {
			l := &benchkit.Lane{Name: name}
			lanes = append(lanes, l)
			return l
		}
		ref, multi, noop := lane("raw, ack each"), lane("raw, multiple-ack"), lane("worker, no-op handler")
		hand, slow := lane("hand-rolled SET NX PX + SET"), lane("worker, 2 ms handler, prefetch 256")
		stalled, ordered := lane("worker, 2 ms, one message stalls"), lane("worker, 2 ms, ordered by key (1,000)")
		// The raw multiple-ack and no-op lanes run twice each, in the order
		// A B B A, and the 2 ms lane once before and once after the stall lane:
		// on this shared machine a lane's rate drifts by more than the target
		// margins within seconds, and a drift that is steady over the four (or
		// three) slices then falls on both sides of the ratio alike.
		steps := []struct {
			lane *benchkit.Lane
			fn   func(queue string) error
		}{
			{ref, func(q string) error { return b.raw(q, 256, false) }},
			{multi, func(q string) error { return b.raw(q, 256, true) }},
			{noop, func(q string) error { return b.worker(q, 0, "", 0) }},
			{noop, func(q string) error { return b.worker(q, 0, "", 0) }},
			{multi, func(q string) error { return b.raw(q, 256, true) }},
			{hand, func(q string) error { return b.handRolled(q) }},
			{slow, func(q string) error { return b.worker(q, 2*time.Millisecond, "", 0) }},
			{stalled, func(q string) error {
				d, err := b.workerUntil(q, 2*time.Millisecond, "m-"+strconv.Itoa(n/3), stall, int64(n-1))
				stallOthers = d
				return err
			}},
			{slow, func(q string) error { return b.worker(q, 2*time.Millisecond, "", 0) }},
			{ordered, func(q string) error { return b.workerOrdered(q, 2*time.Millisecond) }},
		}
		for _, s := range steps {
			q, err := b.queue(s.lane == ordered)
			if err != nil {
				return err
			}
			c0, e0 := benchkit.CPUTime(b.broker), s.lane.Elapsed
			err = b.env.Measure(s.lane, n, func() error { return s.fn(q.Queue) })
			brokerCPU[s.lane] += benchkit.CPUTime(b.broker) - c0
			if s.lane == slow {
				slowRuns = append(slowRuns, s.lane.Elapsed-e0)
			}
			_ = q.Delete(b.conn)
			err = errors.Join(err, b.forget(q.Queue))
			if err != nil {
				return err
			}
		}
		fmt.Printf("\nrepetition %d\n", r)
		benchkit.Table(os.Stdout, ref, lanes...)
		fmt.Printf("%-40s", "broker (beam.smp) CPU us/msg:")
		for _, l := range lanes {
			fmt.Printf(" %.1f", l.PerMsg(brokerCPU[l]))
		}
		fmt.Println()
		fmt.Printf("%-40s", "all three processes' CPU us/msg:")
		for _, l := range lanes {
			fmt.Printf(" %.1f", l.PerMsg(brokerCPU[l]+l.GoCPU+l.ServerCPU))
		}
		fmt.Println()
		want := min(15000, 0.8*min(256/0.002, noop.Rate()))
		fmt.Printf("\n  2 ms handler >= %.0f msgs/s (15,000, or 0.8 of prefetch/2 ms or of no-op):  %.0f  %s\n",
			want, slow.Rate(), benchkit.Verdict(slow.Rate() >= want))
		fmt.Printf("  no-op worker >= 0.75x the raw multiple-ack consumer (2 slices each, A B B A):  %.2fx  %s\n",
			noop.Rate()/multi.Rate(), benchkit.Verdict(noop.Rate() >= 0.75*multi.Rate()))
		fmt.Printf("  hand-rolled lane vs the worker:                           %.2fx\n", hand.Rate()/noop.Rate())
		fmt.Printf("  ordered by key (1,000 keys) vs unordered, 2 ms handler:  %.2fx\n", ordered.Rate()/slow.Rate())
		fmt.Printf("  drift: the same 2 ms lane, run again after the stall lane, took %v against %v:  %.2fx\n",
			slowRuns[1].Round(time.Millisecond), slowRuns[0].Round(time.Millisecond), slowRuns[1].Seconds()/slowRuns[0].Seconds())
		mean := slow.Elapsed / 2
		ratio := stallOthers.Seconds() / mean.Seconds()
		fmt.Printf("  stall, lanes one after the other: the others settled in %v against %v without it (the 2 ms lane before and after):  %.2fx  %s (<= 1.2x)\n",
			stallOthers.Round(time.Millisecond), mean.Round(time.Millisecond), ratio, benchkit.Verdict(ratio <= 1.2))
		with, without, err := b.pairedStall(stall)
		if err != nil {
			return err
		}
		ratio = with.Seconds() / without.Seconds()
		fmt.Printf("  stall, both lanes at once: the others settled in %v against %v without it:  %.2fx  %s (<= 1.2x)\n",
			with.Round(time.Millisecond), without.Round(time.Millisecond), ratio, benchkit.Verdict(ratio <= 1.2))
		if err := b.noopSlices(pairs); err != nil {
			return err
		}
		if err := b.stallSlices(pairs, stall); err != nil {
			return err
		}
	}
	return nil
}

// stallSlices runs the 2 ms lane and the stall lane in pairs of adjacent runs
// (see the package doc) and prints every pair's figures, their medians, the ratio
// of the sums and both lanes' totals.
func (b *bench) stallSlices(pairs int, stall time.Duration) error {
	if pairs < 1 {
		return nil
	}
	plain, stalled := &benchkit.Lane{Name: "slices: worker, 2 ms handler"}, &benchkit.Lane{Name: "slices: worker, 2 ms, one stalls"}
	broker := map[*benchkit.Lane]time.Duration{}
	var with, without time.Duration
	var ratios, goRatios, allRatios []float64
	fmt.Printf("\n  stall, paired slices (%d pairs, each slice a whole run of its lane on a queue filled right before it):\n", pairs)
	for k := 0; k < pairs; k++ {
		var got [2]slice // 0: the 2 ms lane, 1: the stall lane
		slices := []struct {
			lane *benchkit.Lane
			run  workerLane
			out  *slice
		}{
			{plain, workerLane{wait: 2 * time.Millisecond, until: int64(b.n)}, &got[0]},
			{stalled, workerLane{wait: 2 * time.Millisecond, stallID: "m-" + strconv.Itoa(b.n/3), stall: stall,
				until: int64(b.n - 1), release: true}, &got[1]},
		}
		if k%2 == 1 {
			slices[0], slices[1] = slices[1], slices[0]
		}
		for _, sl := range slices {
			// Each slice's queue is filled right before it runs, as the table's
			// lanes are: the broker's work after a fill then falls on both alike.
			q, err := b.queue(false)
			if err != nil {
				return err
			}
			sl.run.queue = q.Queue
			c0, g0, s0, w0 := benchkit.SchedCPU(b.broker), sl.lane.GoCPU, sl.lane.ServerCPU, writes()
			err = b.env.Measure(sl.lane, b.n, func() error {
				var err error
				sl.out.settled, err = b.workerRun(sl.run)
				return err
			})
			bc := benchkit.SchedCPU(b.broker) - c0
			broker[sl.lane] += bc
			sl.out.goCPU = sl.lane.GoCPU - g0
			sl.out.all = sl.out.goCPU + sl.lane.ServerCPU - s0 + bc
			sl.out.writes = writes() - w0
			_ = q.Delete(b.conn)
			err = errors.Join(err, b.forget(q.Queue))
			if err != nil {
				return err
			}
		}
		without += got[0].settled
		with += got[1].settled
		ratios = append(ratios, got[1].settled.Seconds()/got[0].settled.Seconds())
		goRatios = append(goRatios, got[1].goCPU.Seconds()/got[0].goCPU.Seconds())
		allRatios = append(allRatios, got[1].all.Seconds()/got[0].all.Seconds())
		order := "2 ms lane first"
		if k%2 == 1 {
			order = "stall lane first"
		}
		us := func(d time.Duration) float64 { return d.Seconds() * 1e6 / float64(b.n) }
		fmt.Printf("    pair %d (%s): the others settled in %v against %v:  %.2fx;  Go CPU/msg %.1f against %.1f us:  %.2fx;"+
			"  the three processes' %.1f against %.1f us:  %.2fx;  write calls/msg %.2f against %.2f\n",
			k+1, order, got[1].settled.Round(time.Millisecond), got[0].settled.Round(time.Millisecond), ratios[k],
			us(got[1].goCPU), us(got[0].goCPU), goRatios[k], us(got[1].all), us(got[0].all), allRatios[k],
			float64(got[1].writes)/float64(b.n), float64(got[0].writes)/float64(b.n))
	}
	benchkit.Table(os.Stdout, plain, plain, stalled)
	for _, l := range []*benchkit.Lane{plain, stalled} {
		fmt.Printf("    %-40s broker (beam.smp) CPU %.1f us/msg, all three processes' %.1f us/msg\n", l.Name,
			l.PerMsg(broker[l]), l.PerMsg(broker[l]+l.GoCPU+l.ServerCPU))
	}
	m := benchkit.Median(ratios)
	fmt.Printf("  stall, paired slices: median of %d pair ratios:  %.2fx  %s (<= 1.2x); sums: %v against %v:  %.2fx\n",
		len(ratios), m, benchkit.Verdict(m <= 1.2), with.Round(time.Millisecond), without.Round(time.Millisecond),
		with.Seconds()/without.Seconds())
	fmt.Printf("  stall, paired slices: CPU per message, median of %d pair ratios: this process's %.2fx, the three processes' %.2fx"+
		" (the broker also serves whatever else uses it)\n", len(goRatios), benchkit.Median(goRatios), benchkit.Median(allRatios))
	return nil
}

// slice is what one run of a lane in the paired slices took.
type slice struct {
	settled time.Duration // until every message but a stalled one settled
	goCPU   time.Duration // this process
	all     time.Duration // this process, redis-server and the broker
	writes  int64         // this process's write system calls (acks, store calls)
}

// brokerPid finds the local RabbitMQ's beam.smp, or -1.
func brokerPid() int {
	out, err := exec.Command("pgrep", "-o", "beam.smp").Output()
	if err != nil {
		return -1
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return -1
	}
	return pid
}

// orderKeys is how many ordering keys the ordered lane's messages spread over.
const orderKeys = 1000

// queue declares a fresh topology and fills its work queue with n messages, each
// with an ordering key header when keyed.
func (b *bench) queue(keyed bool) (idemamqp.Topology, error) {
	b.seq++
	t := idemamqp.Topology{Queue: "idemkit-bench-" + strconv.Itoa(b.seq) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	if err := t.Declare(b.conn); err != nil {
		return t, err
	}
	return t, b.publish(t.Queue, keyed)
}

func (b *bench) publish(queue string, keyed bool) error {
	ch, err := b.conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	ctx := context.Background()
	body := []byte(`{"order":42,"items":3}`)
	var last *amqp091.DeferredConfirmation
	for i := 0; i < b.n; i++ {
		msg := amqp091.Publishing{MessageId: "m-" + strconv.Itoa(i), Body: body}
		if keyed {
			msg.Headers = amqp091.Table{"k": "k-" + strconv.Itoa(i%orderKeys)}
		}
		c, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false, msg)
		if err != nil {
			return err
		}
		last = c
		if i%1000 == 999 {
			if ok, err := c.WaitContext(ctx); err != nil || !ok {
				return fmt.Errorf("publish not confirmed: %v", err)
			}
		}
	}
	if ok, err := last.WaitContext(ctx); err != nil || !ok {
		return fmt.Errorf("publish not confirmed: %v", err)
	}
	return nil
}

// consume runs each on every delivery of queue and acks it (one multiple-ack per
// run of deliveries already received when multiple).
func (b *bench) consume(queue string, prefetch int, multiple bool, each func(amqp091.Delivery) error) error {
	conn, err := amqp091.Dial(b.url)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return err
	}
	msgs, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	for i := 0; i < b.n; {
		d := <-msgs
		i++
		if err := each(d); err != nil {
			return err
		}
		if !multiple {
			if err := d.Ack(false); err != nil {
				return err
			}
			continue
		}
		last := d
		for more := true; more && i < b.n; {
			select {
			case d = <-msgs:
				i++
				if err := each(d); err != nil {
					return err
				}
				last = d
			default:
				more = false
			}
		}
		if err := last.Ack(true); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) raw(queue string, prefetch int, multiple bool) error {
	return b.consume(queue, prefetch, multiple, func(amqp091.Delivery) error { return nil })
}

// handRolled is the idempotency users write by hand, one message at a time.
func (b *bench) handRolled(queue string) error {
	ctx := context.Background()
	prefix := "idemkit-bench-hand-" + queue
	return b.consume(queue, 256, false, func(d amqp091.Delivery) error {
		key := prefix + ":" + d.MessageId
		ok, err := b.rdb.SetNX(ctx, key, "started", 30*time.Second).Result()
		if err != nil || !ok {
			return err
		}
		return b.rdb.Set(ctx, key, "done", 24*time.Hour).Err()
	})
}

// pairedStall runs the 2 ms lane and the stall lane at the same time, each on a
// queue of its own, so that whatever else the machine does falls on both alike:
// it returns the time until every message but the stalled one settled in the
// stall lane and the time until every message settled in the other.
func (b *bench) pairedStall(stall time.Duration) (with, without time.Duration, err error) {
	plain, err := b.queue(false)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = plain.Delete(b.conn) }()
	stalled, err := b.queue(false)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = stalled.Delete(b.conn) }()
	errs := make(chan error, 1)
	go func() {
		var err error
		without, err = b.workerUntil(plain.Queue, 2*time.Millisecond, "", 0, int64(b.n))
		errs <- err
	}()
	with, err = b.workerUntil(stalled.Queue, 2*time.Millisecond, "m-"+strconv.Itoa(b.n/3), stall, int64(b.n-1))
	return with, without, errors.Join(err, <-errs)
}

func (b *bench) worker(queue string, wait time.Duration, stallID string, stall time.Duration) error {
	_, err := b.workerUntil(queue, wait, stallID, stall, int64(b.n))
	return err
}

func (b *bench) workerOrdered(queue string, wait time.Duration) error {
	_, err := b.workerUntil(queue, wait, "", 0, int64(b.n), idemamqp.WithOrdering(idemamqp.ByKeyHeader("k")))
	return err
}

// workerUntil runs the worker over queue until every message settled, and
// returns when until of them had.
func (b *bench) workerUntil(queue string, wait time.Duration, stallID string, stall time.Duration, until int64,
	opts ...idemamqp.Option) (time.Duration, error) {
	return b.workerRun(workerLane{queue: queue, wait: wait, stallID: stallID, stall: stall, until: until}, opts...)
}

// workerLane is one run of the worker over a filled queue.
type workerLane struct {
	queue   string
	wait    time.Duration // every handler's
	stallID string        // the message whose handler blocks for stall instead ("": none)
	stall   time.Duration
	until   int64 // the settlements the returned time counts up to
	// release unblocks the stalled handler as soon as until messages settled
	// (still after stall at the latest): the measured part of the run is the
	// same, and the run does not idle for the rest of stall.
	release bool
}

// workerRun runs the worker over l.queue until every message settled, and returns
// the time from the start of Run until l.until of them had.
func (b *bench) workerRun(l workerLane, opts ...idemamqp.Option) (time.Duration, error) {
	done := newSettled(l.until)
	store, err := redisstore.NewStore(b.rdb, consumer.WithPrefix("idemkit-bench-amqp-"+l.queue), consumer.WithScope("bench"),
		consumer.WithObserver(done))
	if err != nil {
		return 0, err
	}
	if err := store.Load(context.Background()); err != nil {
		return 0, err
	}
	var released <-chan struct{} // nil: never
	if l.release {
		released = done.reached
	}
	w, err := idemamqp.NewWorker(store, b.url, idemamqp.Topology{Queue: l.queue},
		func(ctx context.Context, d amqp091.Delivery) (struct{}, error) {
			dur, early := l.wait, (<-chan struct{})(nil)
			if l.stallID != "" && d.MessageId == l.stallID {
				dur, early = l.stall, released
			}
			if dur > 0 {
				t := time.NewTimer(dur)
				defer t.Stop()
				select {
				case <-t.C:
				case <-early:
				case <-ctx.Done():
				}
			}
			return struct{}{}, nil
		},
		append([]idemamqp.Option{idemamqp.WithPrefetch(256), idemamqp.WithDeclare(false),
			idemamqp.WithShutdownGrace(l.stall + time.Second)}, opts...)...)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	start := time.Now()
	go func() { stopped <- w.Run(ctx) }()
	for done.n.Load() < int64(b.n) {
		if time.Since(start) > 5*time.Minute {
			cancel()
			<-stopped
			return 0, fmt.Errorf("only %d of %d settled", done.n.Load(), b.n)
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	reached := time.Since(start)
	if at := done.at.Load(); at != 0 {
		reached = time.Unix(0, at).Sub(start)
	}
	return reached, <-stopped
}

// forget deletes the records a worker run over queue left in Redis, out of the
// measured time (see benchkit.Forget): the raw lanes write none, so a rehash of
// the keys piled up before would fall on the worker's side of a pair alone.
func (b *bench) forget(queue string) error {
	_, err := benchkit.Forget(context.Background(), b.rdb, "idemkit-bench-amqp-"+queue+":*")
	return err
}

// writes is this process's count of write system calls (/proc/self/io syscw).
func writes() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "syscw: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}
