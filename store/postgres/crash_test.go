package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/kafka"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Where a member process kills itself (SIGKILL) in the crash-point matrix.
const (
	crashBeforeWrites  = "before-writes"  // in the transaction, before the business write
	crashBeforeCommit  = "before-commit"  // after the business write, before the commit
	crashAfterCommit   = "after-commit"   // after the commit, before the store's completion
	crashAfterComplete = "after-complete" // after the store's completion, before the offset commit
)

// Environment of a member process.
const (
	envCrashPoint = "IDEMKIT_TEST_CRASH_POINT"
	envBrokers    = "IDEMKIT_TEST_BROKERS"
	envRedis      = "IDEMKIT_TEST_REDIS"
	envPrefix     = "IDEMKIT_TEST_PREFIX"
	envSchema     = "IDEMKIT_TEST_SCHEMA"
	envStore      = "IDEMKIT_TEST_STORE" // "redis" (claims in Redis), "postgres" (the Store alone) or "partitioned"
)

// crashAfter is how many events a member charges before it crashes.
const crashAfter = 300

type payment struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

// crashMember runs this test binary as a payments member process when a test
// asked for one; it reports whether it did.
func crashMember() bool {
	point := os.Getenv(envCrashPoint)
	if point == "" || os.Getenv(envBrokers) == "" {
		return false
	}
	if err := runPaymentsMember(context.Background(), point, os.Getenv(envStore), os.Getenv(envBrokers), os.Getenv(envRedis), os.Getenv(envPrefix), os.Getenv(envSchema)); err != nil {
		fmt.Fprintln(os.Stderr, "member:", err)
		os.Exit(1)
	}
	os.Exit(0)
	return true
}

func die() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL); select {} }

// charger is what a member process (Kafka or RabbitMQ) shares: the pool, the
// store and the handler that charges a payment with InTx, killing the process at
// point ("" never) once crashAfter payments were charged.
type charger struct {
	pool    *pgxpool.Pool
	rdb     *redis.Client
	store   consumer.Store
	point   string
	charged atomic.Int64
}

func newCharger(ctx context.Context, point, storeKind, redisAddr, prefix, schema string) (*charger, error) {
	cfg, err := pgxpool.ParseConfig(testenv.PostgresDSN())
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	c := &charger{point: point, rdb: redis.NewClient(&redis.Options{Addr: redisAddr})}
	if c.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, err
	}
	// The lease is short so that the survivor takes the killed member's claims over
	// soon, and long enough that a survivor starved of CPU (make test-loaded) renews
	// its own in time: with 1s, the partitioned store's renewals came late there and
	// keys ran out of attempts on lease losses alone (dead-lettered after running).
	opts := []consumer.Option{consumer.WithPrefix(prefix), consumer.WithScope("payments"), consumer.WithLease(4 * time.Second),
		consumer.WithObserver(c)}
	switch storeKind {
	case "postgres":
		c.store, err = NewStore(c.pool, opts...)
	case "partitioned":
		c.store, err = NewPartitionedStore(c.pool, opts...)
	default:
		c.store, err = redisstore.NewStore(c.rdb, opts...)
	}
	if err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

func (c *charger) close() { c.pool.Close(); _ = c.rdb.Close() }

func (c *charger) hit(at string) bool { return c.point == at && c.charged.Load() >= crashAfter }

func (c *charger) charge(ctx context.Context, p payment) (string, error) {
	v, err := InTx(ctx, c.pool, func(ctx context.Context, tx pgx.Tx) (string, error) {
		if c.hit(crashBeforeWrites) {
			die()
		}
		if _, err := tx.Exec(ctx, `INSERT INTO charges VALUES ($1, $2)`, p.ID, p.Amount); err != nil {
			return "", err
		}
		if c.hit(crashBeforeCommit) {
			die()
		}
		return "ch_" + p.ID, nil
	})
	if err == nil {
		c.charged.Add(1)
		if c.hit(crashAfterCommit) {
			die()
		}
	}
	return v, err
}

// OnOutcome is told of every outcome (the charger observes its store), after the
// store recorded it and before the broker is told (offset commit, ack): at
// crashAfterComplete the member dies once a record is completed in the store,
// before its offset is committed or its delivery acked.
func (c *charger) OnOutcome(e consumer.OutcomeEvent) {
	if e.Outcome == consumer.Success && c.hit(crashAfterComplete) {
		die()
	}
}

// runPaymentsMember consumes the payments topic, charging each payment in
// PostgreSQL with InTx; point names where it kills itself ("" never).
func runPaymentsMember(ctx context.Context, point, storeKind, brokers, redisAddr, prefix, schema string) error {
	ch, err := newCharger(ctx, point, storeKind, redisAddr, prefix, schema)
	if err != nil {
		return err
	}
	defer ch.close()
	c, err := kafka.NewTyped(ch.store, []kgo.Opt{kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.ConsumerGroup("payments"),
		kgo.ConsumeTopics("payments"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.SessionTimeout(time.Second), kgo.HeartbeatInterval(200 * time.Millisecond)},
		func(rec *kgo.Record) (payment, error) {
			var p payment
			return p, json.Unmarshal(rec.Value, &p)
		}, func(ctx context.Context, p payment, _ *kgo.Record) (string, error) { return ch.charge(ctx, p) })
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM)
	defer stop()
	return c.Run(ctx)
}

// The crash-point matrix through the Kafka adapter: 1,000 payments (a fifth
// published twice) charged by a member process that is SIGKILLed at one of four
// points after 300 charges, then by a survivor: the business table holds exactly
// one row per payment every time, and nothing is lost; with the claims in Redis,
// with the PostgreSQL Store alone, and with the time-partitioned Store.
// IDEMKIT_CRASH_REPS sets the repetitions per point (default 2).
func TestCrashMatrixKafka(t *testing.T) {
	reps, _ := strconv.Atoi(os.Getenv("IDEMKIT_CRASH_REPS"))
	if reps < 1 {
		reps = 2
	}
	for _, storeKind := range []string{"redis", "postgres", "partitioned"} {
		for _, point := range []string{crashBeforeWrites, crashBeforeCommit, crashAfterCommit, crashAfterComplete} {
			for rep := range reps {
				t.Run(fmt.Sprintf("%s/%s/%d", storeKind, point, rep), func(t *testing.T) { crashRun(t, storeKind, point) })
			}
		}
	}
}

// crashSchema is migrated, with ten-second partitions for ten minutes ahead for
// the partitioned store (so that some runs cross a window).
func crashSchema(t *testing.T, storeKind string) *pgxpool.Pool {
	t.Helper()
	pool := migrated(t)
	if storeKind == "partitioned" {
		p := Partitioning{Window: 10 * time.Second, Ahead: 10 * time.Minute, Keep: time.Hour}
		if _, _, err := MaintainPartitions(context.Background(), pool, p); err != nil {
			t.Fatal(err)
		}
	}
	return pool
}

func crashRun(t *testing.T, storeKind, point string) {
	const n = 1000
	pool := crashSchema(t, storeKind)
	var schema string
	if err := pool.QueryRow(context.Background(), `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	brokers, _ := testenv.Kafka(t, 4, "payments", "payments.dlq")
	publishPayments(t, brokers, n)
	prefix := testenv.Prefix(t)
	child := testenv.StartSelf(t, envCrashPoint+"="+point, envStore+"="+storeKind, envBrokers+"="+strings.Join(brokers, ","),
		envRedis+"="+testenv.RedisAddr(t), envPrefix+"="+prefix, envSchema+"="+schema)
	if !killedWithin(child.Process.Pid, 60*time.Second) {
		t.Fatalf("the member never crashed at %s", point)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runPaymentsMember(ctx, "", storeKind, strings.Join(brokers, ","), testenv.RedisAddr(t), prefix, schema)
	}()
	testenv.Eventually(t, 90*time.Second, "the survivor to commit every offset", func() bool { return lag(t, brokers) == 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := rows(t, pool, "charges")
	if len(got) != n {
		t.Fatalf("%d payments charged, want %d; dead letters: %s", len(got), n, deadLetterSummary(t, brokers))
	}
	for id, c := range got {
		if c != 1 {
			t.Fatalf("payment %s charged %d times", id, c)
		}
	}
}

func publishPayments(t *testing.T, brokers []string, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("payments"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for i := range n {
		id := fmt.Sprintf("pay-%04d", i)
		body, _ := json.Marshal(payment{ID: id, Amount: 100 + i})
		rec := func() *kgo.Record {
			return &kgo.Record{Key: []byte(id), Value: body, Headers: []kgo.RecordHeader{{Key: kafka.DefaultKeyHeader, Value: []byte(id)}}}
		}
		recs = append(recs, rec())
		if i%5 == 0 {
			recs = append(recs, rec()) // the producer retried
		}
	}
	rand.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// lag is the payments group's uncommitted record count (-1 when unknown).
func lag(t *testing.T, brokers []string) int64 {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	ends, err := adm.ListEndOffsets(ctx, "payments")
	if err != nil {
		return -1
	}
	committed, err := adm.FetchOffsets(ctx, "payments")
	if err != nil {
		return -1
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) {
		at := int64(0)
		if c, ok := committed.Lookup("payments", o.Partition); ok {
			at = c.At
		}
		total += o.Offset - at
	})
	return total
}

// killedWithin waits for process pid to end and reports whether it was killed by
// SIGKILL within d (it reaps the process itself).
func killedWithin(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		if err != nil {
			return false
		}
		if got == pid {
			return ws.Signaled() && ws.Signal() == syscall.SIGKILL
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// deadLetterSummary counts the payments dead-letter topic's copies by kind, with
// one error text of each kind, for a failure message that says where payments went.
func deadLetterSummary(t *testing.T, brokers []string) string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("payments.dlq"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		return err.Error()
	}
	defer cl.Close()
	kinds, texts := map[string]int{}, map[string]string{}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			var kind, text string
			for _, h := range r.Headers {
				switch h.Key {
				case kafka.HeaderKind:
					kind = string(h.Value)
				case kafka.HeaderError:
					text = string(h.Value)
				}
			}
			kinds[kind]++
			texts[kind] = consumer.CapText(text, 300)
		})
	}
	return fmt.Sprintf("%v %q", kinds, texts)
}
