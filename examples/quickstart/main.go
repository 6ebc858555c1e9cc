// Command quickstart shows idemkit making a Kafka consumer idempotent, with zero
// set-up: an in-process Kafka broker (franz-go's kfake) and an in-process Redis that
// runs idemkit's own Lua scripts (miniredis). Set IDEMKIT_KAFKA_BROKERS and
// IDEMKIT_REDIS_ADDR to use real ones.
//
// A producer publishes order events, a fifth of them twice. Three group members
// charge them through the adapters/kafka runner; one member crashes in the middle
// of its work, with a window of claimed records whose handlers never reach the
// payment provider (its Redis connection dies once the orders it did charge are
// recorded, and it drops out of the group). The survivors take its partitions and
// its claims over.
// A ledger counts the charges per order: every order must be charged exactly once.
// The program exits 1 if any order was charged twice or not at all.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/idemkit/idemkit/adapters/kafka"
	"github.com/idemkit/idemkit/consumer"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

type order struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

// ledger is the side effect: the payment provider's book of charges.
type ledger struct {
	mu      sync.Mutex
	charges map[string]int
}

func (l *ledger) charge(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.charges[id]++
}

// handle is the handler: it charges the order once per run, unless its claim
// was lost (another member runs it then).
func (l *ledger) handle(ctx context.Context, o order) (string, error) {
	if ctx.Err() != nil {
		return "", context.Cause(ctx)
	}
	l.charge(o.ID)
	return "ch_" + o.ID, nil
}

func (l *ledger) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.charges)
}

// tally counts what the members did: an observer of their stores
// (consumer.WithObserver), told of every execution and every dead letter.
type tally struct {
	delivered, success, duplicate, deadLettered, takenOver atomic.Int64
}

// OnClaim counts the claims the store granted by taking a started record over:
// its owner's lease ran out because the owner died holding it.
func (t *tally) OnClaim(e consumer.ClaimEvent) {
	t.takenOver.Add(int64(e.TakenOver))
}

func (t *tally) OnOutcome(e consumer.OutcomeEvent) {
	if e.Action != consumer.Ack { // run again later, or dead-lettered (OnDeadLetter)
		return
	}
	t.delivered.Add(1)
	switch e.Outcome {
	case consumer.Success:
		t.success.Add(1)
	case consumer.Duplicate:
		t.duplicate.Add(1)
	}
}

func (t *tally) OnDeadLetter(consumer.DeadLetterEvent) {
	t.delivered.Add(1)
	t.deadLettered.Add(1)
}

func main() {
	n := flag.Int("orders", 1000, "number of order events")
	dupShare := flag.Float64("duplicates", 0.2, "share of events published twice")
	flag.Parse()
	if err := run(*n, *dupShare); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(n int, dupShare float64) error {
	ctx := context.Background()
	topic := "orders-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	brokers, kafkaWhere := strings.Split(os.Getenv("IDEMKIT_KAFKA_BROKERS"), ","), "Kafka at "+os.Getenv("IDEMKIT_KAFKA_BROKERS")
	if os.Getenv("IDEMKIT_KAFKA_BROKERS") == "" {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(500*time.Millisecond))
		if err != nil {
			return err
		}
		defer cluster.Close()
		brokers, kafkaWhere = cluster.ListenAddrs(), "in-process Kafka (kfake)"
	}
	redisAddr, redisWhere := os.Getenv("IDEMKIT_REDIS_ADDR"), "Redis at "+os.Getenv("IDEMKIT_REDIS_ADDR")
	if redisAddr == "" {
		mini, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mini.Close()
		stopClock := runClock(mini)
		defer stopClock()
		redisAddr, redisWhere = mini.Addr(), "in-process Redis (miniredis) running idemkit's Lua scripts"
	}

	admin, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer admin.Close()
	if _, err := kadm.NewClient(admin).CreateTopics(ctx, 8, 1, nil, topic, topic+".dlq"); err != nil {
		return fmt.Errorf("create topics: %w", err)
	}
	published, err := publish(ctx, brokers, topic, n, dupShare)
	if err != nil {
		return err
	}

	quiet := slog.New(slog.DiscardHandler)
	storeOpts := []consumer.Option{
		consumer.WithScope("payments"),
		consumer.WithPrefix("idemkit-quickstart-" + topic),
		consumer.WithLease(500 * time.Millisecond),
		consumer.WithLogger(quiet),
	}
	book := &ledger{charges: make(map[string]int)}
	var tl tally
	storeOpts = append(storeOpts, consumer.WithObserver(&tl))
	decode := func(rec *kgo.Record) (order, error) {
		var o order
		return o, json.Unmarshal(rec.Value, &o)
	}
	// A member with a doom "dies" once it has charged doom.after orders: its
	// handlers block from then on, never reaching the payment provider, until it is
	// stopped.
	newMember := func(rdb *redis.Client, doom *doom) (*kafka.Consumer[order, string], error) {
		store, err := redisstore.NewStore(rdb, storeOpts...)
		if err != nil {
			return nil, err
		}
		charge := func(ctx context.Context, o order, _ *kgo.Record) (string, error) {
			if doom != nil && !doom.charge(o.ID, book) {
				<-ctx.Done()
				return "", context.Cause(ctx)
			}
			if doom == nil {
				return book.handle(ctx, o)
			}
			return "ch_" + o.ID, nil
		}
		return kafka.NewTyped(store, []kgo.Opt{
			kgo.SeedBrokers(brokers...),
			kgo.ConsumerGroup("billing"),
			kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.SessionTimeout(time.Second),
			kgo.HeartbeatInterval(200 * time.Millisecond),
			kgo.RebalanceTimeout(3 * time.Second),
			kgo.FetchMaxWait(100 * time.Millisecond),
		}, decode, charge, kafka.WithMaxPollRecords(100), kafka.WithLogger(quiet),
			kafka.WithShutdownGrace(0))
	}

	start := time.Now()
	shared := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer shared.Close()
	// The doomed member joins first and dies in the middle of its work, after
	// charging 100 orders; two more members join meanwhile.
	doomedRedis := redis.NewClient(&redis.Options{Addr: redisAddr, MaxRetries: -1})
	dm := &doom{after: min(100, n/10), crashed: make(chan struct{})}
	doomed, err := newMember(doomedRedis, dm)
	if err != nil {
		return err
	}
	stopDoomed := runMember(doomed)
	// The others join once the doomed member is charging, so that it has records
	// of its own when it crashes.
	for began := time.Now(); dm.count() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Since(began) > 30*time.Second {
			return errors.New("the doomed member never got records")
		}
	}
	var members []func()
	for i := 0; i < 2; i++ {
		m, err := newMember(shared, nil)
		if err != nil {
			return err
		}
		members = append(members, runMember(m))
	}
	select {
	case <-dm.crashed:
	case <-time.After(30 * time.Second):
		return errors.New("the doomed member never got records")
	}
	// The crash comes once the orders the member charged are recorded completed:
	// a charge whose completion dies with the process is the one window
	// per-message completion leaves open (transactional completion in
	// store/postgres closes it), and this demo shows the takeover of claims, not
	// that window.
	if err := dm.settled(ctx, doomedRedis, storeOpts); err != nil {
		return err
	}
	_ = doomedRedis.Close() // its connection dies with it: no renewal, no completion
	stopDoomed()

	deadline := time.Now().Add(2 * time.Minute)
	for book.count() < n || lag(ctx, admin, topic) != 0 {
		if time.Now().After(deadline) {
			return errors.New("timed out before every order was charged and committed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	elapsed := time.Since(start)
	for _, stop := range members {
		stop()
	}

	double, missing, executed := 0, 0, 0
	for i := 0; i < n; i++ {
		id := orderID(i)
		switch c := book.charges[id]; {
		case c > 1:
			double++
			fmt.Fprintf(os.Stderr, "order %s charged %d times\n", id, c)
		case c == 0:
			missing++
			fmt.Fprintf(os.Stderr, "order %s never charged\n", id)
		}
		executed += book.charges[id]
	}
	fmt.Printf("idemkit quickstart: 3 group members (one crashes), %d orders on 8 partitions\n", n)
	fmt.Printf("  %s; %s\n", kafkaWhere, redisWhere)
	fmt.Printf("  records of one key in order, different keys at once (kafka.ByKey)\n\n")
	row := func(name string, v any) { fmt.Printf("  %-42s %8v\n", name, v) }
	row("records published (with duplicates)", published)
	row("records settled by the group", tl.delivered.Load())
	row("handlers executed (orders charged)", executed)
	row("duplicates skipped", tl.duplicate.Load())
	row("claims taken over after the crash", tl.takenOver.Load())
	row("dead-lettered", tl.deadLettered.Load())
	row("double executions", double)
	row("orders never charged", missing)
	fmt.Printf("\n  done in %v\n", elapsed.Round(time.Millisecond))
	if double > 0 || missing > 0 {
		return fmt.Errorf("%d orders charged twice, %d never charged", double, missing)
	}
	fmt.Println("  every order charged exactly once")
	return nil
}

// doom is a member's crash plan: it charges after orders, then stops charging.
type doom struct {
	after   int
	crashed chan struct{}

	mu      sync.Mutex
	charged []string // the orders it charged, in order
}

// count is how many orders the member charged.
func (d *doom) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.charged)
}

// charge charges id in book and reports true while the member is alive; the
// first call past the plan closes crashed and reports false, as every later one.
func (d *doom) charge(id string, book *ledger) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.charged) >= d.after {
		if len(d.charged) == d.after {
			close(d.crashed)
			d.charged = append(d.charged, "") // the crash is announced once
		}
		return false
	}
	book.charge(id)
	d.charged = append(d.charged, id)
	return true
}

// settled waits until the store shows every order the member charged completed.
func (d *doom) settled(ctx context.Context, rdb *redis.Client, opts []consumer.Option) error {
	store, err := redisstore.NewStore(rdb, opts...)
	if err != nil {
		return err
	}
	d.mu.Lock()
	keys := make([]consumer.Key, 0, len(d.charged))
	for _, id := range d.charged {
		if id != "" {
			keys = append(keys, consumer.Key(id))
		}
	}
	d.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		recs, err := store.PeekRecords(ctx, "", keys)
		if err != nil {
			return err
		}
		open := 0
		for _, r := range recs {
			if r.State != "completed" {
				open++
			}
		}
		if open == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d orders the doomed member charged were never recorded completed", open)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func orderID(i int) string { return fmt.Sprintf("order-%05d", i) }

func runMember(c *kafka.Consumer[order, string]) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx)
	}()
	return func() { cancel(); <-done }
}

// publish sends n orders, the first dupShare of them twice, each with its order id
// as the Idempotency-Key header.
func publish(ctx context.Context, brokers []string, topic string, n int, dupShare float64) (int, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	var recs []*kgo.Record
	add := func(i int) {
		body, _ := json.Marshal(order{ID: orderID(i), Amount: 100 + i%900})
		recs = append(recs, &kgo.Record{Key: []byte(orderID(i)), Value: body,
			Headers: []kgo.RecordHeader{{Key: kafka.DefaultKeyHeader, Value: []byte(orderID(i))}}})
	}
	for i := 0; i < n; i++ {
		add(i)
		if i < int(float64(n)*dupShare) {
			add(i) // the producer retried: the same event again
		}
	}
	return len(recs), cl.ProduceSync(ctx, recs...).FirstErr()
}

// lag is the group's uncommitted record count on topic, -1 when it cannot be read.
func lag(ctx context.Context, admin *kgo.Client, topic string) int64 {
	adm := kadm.NewClient(admin)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return -1
	}
	committed, err := adm.FetchOffsets(ctx, "billing")
	if err != nil {
		return -1
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) {
		at := int64(0)
		if c, ok := committed.Lookup(topic, o.Partition); ok {
			at = c.At
		}
		total += o.Offset - at
	})
	return total
}

// runClock counts miniredis's TTLs down in step with the real clock (miniredis
// moves them only when told; leases are TTLs) until the returned stop is called.
func runClock(mini *miniredis.Miniredis) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				mini.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	return func() { close(done); <-exited }
}
