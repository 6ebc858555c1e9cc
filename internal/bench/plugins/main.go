// Command plugins measures what the observability plugins cost on the batch path
// (make bench-plugins): ExecuteBatch with B messages per call and a no-op handler,
// on one goroutine, against one Redis server, in lanes that differ only in the
// observers installed on the store:
//
//   - off: no observer (the reference);
//   - core only: an observer of every hook that does nothing, so what the core's
//     reporting costs by itself, whatever the plugin;
//   - Prometheus: contrib/idemprom, registered on a registry;
//   - OTel Meter: contrib/idemotel's Meter on the SDK, aggregating for a manual reader;
//   - Prometheus + OTel Meter, no tracer: both plugins' metrics together;
//   - both + Tracer, 10% sampled: Prometheus, the Meter and contrib/idemotel's Tracer
//     on the SDK with a parent-based 10% trace-ID-ratio sampler (as services
//     commonly run), spans through a batch span processor to an exporter that
//     drops them;
//   - both + Tracer, every trace sampled: the same with every trace sampled.
//
// The target is at most 5% of the reference's msgs/s lost with both plugins on.
//
// Lanes run interleaved in slices, in an order that rotates from slice to slice,
// so that the machine's noise falls on every lane alike; the whole is repeated
// (-reps, default 3) and each repetition prints its table. CPU per message is this
// process's and redis-server's, from /proc. Redis is a private redis-server unless
// IDEMKIT_REDIS_ADDR names one.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/contrib/idemotel"
	"github.com/idemkit/idemkit/contrib/idemprom"
	"github.com/idemkit/idemkit/internal/benchkit"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func main() {
	n := flag.Int("n", 100000, "messages per lane per repetition")
	b := flag.Int("b", 100, "batch size B")
	reps := flag.Int("reps", 3, "repetitions")
	slices := flag.Int("slices", 30, "interleaved slices per repetition")
	profile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	if *profile != "" {
		f, err := os.Create(*profile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench-plugins:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(*n, *b, *reps, *slices); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "bench-plugins:", err)
		os.Exit(1)
	}
}

var (
	ns      = uuid.MustParse("5d0f1e2a-3b4c-4d5e-8f60-718293a4b5c6")
	payload = []byte(`{"order":42,"amount":1999}`)
)

// lane is one configuration of observers and what it measured.
type lane struct {
	name  string
	store *redisstore.Store
	spans *dropping // the exporter of its spans; nil without tracing
	tp    *sdktrace.TracerProvider
	stats benchkit.Lane // this repetition's
	loss  []float64     // msgs/s lost against the reference, per repetition
}

// dropping is a span exporter that counts the spans it is given and drops them.
type dropping struct{ n atomic.Int64 }

func (d *dropping) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	d.n.Add(int64(len(spans)))
	return nil
}

func (d *dropping) Shutdown(context.Context) error { return nil }

// emptyHooks implements every hook the core reports and does nothing: what the
// core's reporting costs by itself, whatever the plugin.
type emptyHooks struct{}

func (emptyHooks) OnClaim(consumer.ClaimEvent)          {}
func (emptyHooks) OnHandlerStart(consumer.HandlerEvent) {}
func (emptyHooks) OnHandlerEnd(consumer.HandlerEvent)   {}
func (emptyHooks) OnLeaseRenewed(consumer.LeaseEvent)   {}
func (emptyHooks) OnLeaseLost(consumer.LeaseEvent)      {}
func (emptyHooks) OnSettle(consumer.SettleEvent)        {}
func (emptyHooks) OnOutcome(consumer.OutcomeEvent)      {}

// observers makes one lane's observers.
type observers struct {
	empty, prom, meter, tracer bool
	sampler                    sdktrace.Sampler
}

func (o observers) make(l *lane) ([]consumer.Observer, error) {
	var out []consumer.Observer
	if o.empty {
		out = append(out, emptyHooks{})
	}
	if o.prom {
		m, err := idemprom.New()
		if err != nil {
			return nil, err
		}
		if err := prometheus.NewRegistry().Register(m); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	if o.meter {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		mt, err := idemotel.NewMeter(idemotel.WithMeterProvider(mp))
		if err != nil {
			return nil, err
		}
		out = append(out, mt)
	}
	if o.tracer {
		l.spans = &dropping{}
		l.tp = sdktrace.NewTracerProvider(sdktrace.WithSampler(o.sampler), sdktrace.WithBatcher(l.spans))
		tr, err := idemotel.NewTracer(idemotel.WithTracerProvider(l.tp), idemotel.WithSystem("kafka"), idemotel.WithDestination("orders"))
		if err != nil {
			return nil, err
		}
		out = append(out, tr)
	}
	return out, nil
}

func run(n, b, reps, slices int) error {
	ctx := context.Background()
	addr, where, stop, err := testenv.RedisForTool()
	if err != nil {
		return err
	}
	defer stop()
	client := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 8})
	defer client.Close()
	version, pid := benchkit.RedisInfo(ctx, client)
	runID := strconv.FormatInt(time.Now().UnixNano(), 36)

	configs := []struct {
		name string
		obs  observers
	}{
		{"off (no observer)", observers{}},
		{"core only: empty hooks", observers{empty: true}},
		{"Prometheus", observers{prom: true}},
		{"OTel Meter", observers{meter: true}},
		{"Prometheus + OTel Meter, no tracer", observers{prom: true, meter: true}},
		{"both + Tracer, 10% of traces sampled", observers{prom: true, meter: true, tracer: true,
			sampler: sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.1))}},
		{"both + Tracer, every trace sampled", observers{prom: true, meter: true, tracer: true, sampler: sdktrace.AlwaysSample()}},
	}
	lanes := make([]*lane, len(configs))
	for i, c := range configs {
		l := &lane{name: c.name}
		obs, err := c.obs.make(l)
		if err != nil {
			return err
		}
		if l.store, err = redisstore.NewStore(client, consumer.WithPrefix("idemkit-bench-plugins-"+runID),
			consumer.WithScope("bench"), redisstore.WithEvictionCheck(redisstore.EvictionIgnore), consumer.WithObserver(obs...)); err != nil {
			return err
		}
		if err := l.store.Load(ctx); err != nil {
			return err
		}
		lanes[i] = l
	}
	defer func() {
		for _, l := range lanes {
			if l.tp != nil {
				_ = l.tp.Shutdown(ctx)
			}
		}
	}()
	env := benchkit.Env{ServerPid: pid}
	per := n / slices / b * b
	if per == 0 {
		return fmt.Errorf("-n %d over %d slices is less than one batch of %d", n, slices, b)
	}
	fmt.Printf("idemkit bench-plugins: ExecuteBatch on Redis %s (%s), no-op handler, B=%d, %d messages per lane per repetition, %d repetitions\n",
		version, where, b, per*slices, reps)

	for rep := 1; rep <= reps; rep++ {
		for _, l := range lanes {
			l.stats = benchkit.Lane{Name: l.name}
		}
		for s := 0; s < slices; s++ {
			for j := range lanes {
				l := lanes[(s+j)%len(lanes)] // rotate the order: no lane always runs first
				keys := make([]consumer.Key, per)
				for i := range keys {
					keys[i] = consumer.NewKey(ns, runID, l.name, strconv.Itoa(rep), strconv.Itoa(s), strconv.Itoa(i))
				}
				if err := env.Measure(&l.stats, per, func() error { return batches(ctx, l.store, keys, b) }); err != nil {
					return err
				}
			}
		}
		ref := &lanes[0].stats
		fmt.Printf("\nrepetition %d\n", rep)
		stats := make([]*benchkit.Lane, len(lanes))
		for i, l := range lanes {
			stats[i] = &l.stats
			l.loss = append(l.loss, 1-l.stats.Rate()/ref.Rate())
		}
		benchkit.Table(os.Stdout, ref, stats...)
		fmt.Println()
		for _, l := range lanes[1:] {
			fmt.Printf("  %-48s msgs/s lost %5.1f%% (target <= 5%%: %-6s)  Go CPU %+6.2f us/msg\n", l.name, 100*l.loss[rep-1],
				benchkit.Verdict(l.loss[rep-1] <= 0.05), l.stats.PerMsg(l.stats.GoCPU)-ref.PerMsg(ref.GoCPU))
		}
	}

	fmt.Printf("\nmsgs/s lost against the reference, per repetition\n")
	for _, l := range lanes[1:] {
		fmt.Printf("  %-50s", l.name)
		for _, x := range l.loss {
			fmt.Printf(" %6.1f%%", 100*x)
		}
		fmt.Println()
	}
	for _, l := range lanes {
		if l.tp == nil {
			continue
		}
		if err := l.tp.ForceFlush(ctx); err != nil {
			return err
		}
		fmt.Printf("  spans exported by %q: %d for %d messages\n", l.name, l.spans.n.Load(), per*slices*reps)
	}
	return nil
}

// batches runs keys through ExecuteBatch, b at a time, with a no-op handler.
func batches(ctx context.Context, store consumer.Store, keys []consumer.Key, b int) error {
	h := func(context.Context, int, consumer.BatchItem) (struct{}, error) { return struct{}{}, nil }
	items := make([]consumer.BatchItem, b)
	for start := 0; start < len(keys); start += b {
		for i := range items {
			items[i] = consumer.BatchItem{Key: keys[start+i], Payload: payload}
		}
		for i, r := range consumer.ExecuteBatch(ctx, store, items, h) {
			if r.Outcome != consumer.Success {
				return fmt.Errorf("message %d: %v %v", start+i, r.Outcome, r.Err)
			}
		}
	}
	return nil
}
