package kafkashare_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/kafkashare"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/postgres"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The random-fault members' shape.
const (
	rkConcurrency = 4  // handlers per member; a poll holds up to 40 records
	rkLimit       = 10 // the group's delivery limit: above what the faults can add
	rkMaxAttempts = 20 // the store's: above what the faults can add
)

// runTxMember is a share-group member whose handler writes down its start (in
// its own statement, before anything else, finished even if the handler's
// context ends) and then makes its effect, a payments row, with postgres.InTx:
// the effect and the key's completion commit together, so a crash at any
// instant neither loses nor repeats it. Claims are in Redis, which finds the
// committed completions (consumer.WithCompletions).
func runTxMember(name string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(envRedis)})
	defer rdb.Close()
	prefix := os.Getenv(envPrefix)
	pool, err := schemaPool(ctx, os.Getenv(envPostgres), os.Getenv(envSchema))
	if err != nil {
		return err
	}
	defer pool.Close()
	stats := memberStats{rdb: rdb, key: statsKey(prefix, name)}
	store, err := redisstore.NewStore(rdb, consumer.WithPrefix(prefix), consumer.WithScope("payments"),
		consumer.WithLease(time.Second), consumer.WithMaxAttempts(rkMaxAttempts), consumer.WithObserver(stats),
		consumer.WithCompletions(postgres.Completions(pool)))
	if err != nil {
		return err
	}
	pid := os.Getpid()
	c, err := kafkashare.NewTyped(store, shareOpts(strings.Split(os.Getenv(envBrokers), ","), "billing", "payments"),
		decodeEvent, func(ctx context.Context, ev event, _ *kgo.Record) (int, error) {
			if _, err := pool.Exec(context.WithoutCancel(ctx), `INSERT INTO handler_starts VALUES ($1, $2)`, ev.ID, pid); err != nil {
				return 0, err
			}
			return postgres.InTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) (int, error) {
				work := time.NewTimer(time.Duration(2+rand.IntN(7)) * time.Millisecond) // the payment provider
				defer work.Stop()
				select {
				case <-work.C:
				case <-ctx.Done():
					return 0, ctx.Err()
				}
				_, err := tx.Exec(ctx, `INSERT INTO payments VALUES ($1, $2)`, ev.ID, ev.Amount)
				return ev.Amount, err
			})
		}, kafkashare.WithMaxPollRecords(40), kafkashare.WithConcurrency(rkConcurrency),
		kafkashare.WithAcquisitionMargin(500*time.Millisecond), kafkashare.WithBusyHold(5*time.Minute),
		kafkashare.WithDeliveryLimit(rkLimit))
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// schemaPool connects to dsn with schema as the search path.
func schemaPool(ctx context.Context, dsn, schema string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	return pgxpool.NewWithConfig(ctx, cfg)
}

// paymentsSchema makes a schema of t's own with idemkit's tables (Migrate), the
// payments table and the handler_starts table, dropped when t ends.
func paymentsSchema(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	db := testenv.Postgres(t) // skips or fails as the environment says when there is no server
	schema := "t_" + strings.ToLower(strings.NewReplacer(":", "_", "-", "_", "/", "_", ".", "_").Replace(testenv.Prefix(t)))
	if len(schema) > 60 {
		schema = schema[len(schema)-60:]
	}
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) })
	pool, err := schemaPool(ctx, testenv.PostgresDSN(), schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE payments (order_id text NOT NULL, amount int NOT NULL);
		CREATE TABLE handler_starts (order_id text NOT NULL, pid int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return pool, schema
}

// countBy returns the rows of table per order.
func countBy(t *testing.T, pool *pgxpool.Pool, table string) map[string]int {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT order_id, count(*) FROM `+table+` GROUP BY order_id`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		out[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func countRows(t *testing.T, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM `+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Three member processes share two partitions, and are SIGKILLed or SIGSTOPped
// at random instants of their work: six faults, each at a random point of the
// progress (a random number of payments made) plus a random delay, each on a
// random member, killed (and replaced by a fresh member) or stopped for a random
// time up to past the lock (then resumed). Then every event has exactly one
// payments row (its effect once: InTx), its handler ran, nothing is
// dead-lettered or left unfinished, no record came near the delivery limit, and
// each key's attempts in the store are its handler starts, except for handlers
// killed between their claim and the start they write down: at most
// rkConcurrency per kill. A member that claimed records it merely held (a poll
// holds ten times its handlers) would be charged attempts for them.
// IDEMKIT_TEST_SEED replays a run.
func TestShareMembersKilledAtRandom(t *testing.T) {
	const n, faults = 1500, 6
	brokers, _ := shareKfakeLimit(t, rkLimit, 2, "payments", "payments.dlq")
	startAtEarliest(t, brokers, "billing")
	pool, schema := paymentsSchema(t)
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	events := produce(t, brokers, "payments", n, 0.2)
	seed := rand.Uint64()
	if s := os.Getenv("IDEMKIT_TEST_SEED"); s != "" {
		_, _ = fmt.Sscan(s, &seed)
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	t.Logf("seed %d (IDEMKIT_TEST_SEED replays it)", seed)

	var mu sync.Mutex // guards live
	names := 0
	spawn := func() *exec.Cmd {
		names++
		return startMember(t, brokers, prefix, fmt.Sprintf("m%d", names),
			envPostgres+"="+testenv.PostgresDSN(), envSchema+"="+schema)
	}
	live := []*exec.Cmd{spawn(), spawn(), spawn()}
	var resumes sync.WaitGroup
	kills := 0
	for i := range faults {
		// The fault's moment: once a random number of payments within its share
		// of the run is made, then a random delay.
		at := (i*n + rng.IntN(n)) / (faults + 1)
		testenv.Eventually(t, 120*time.Second, fmt.Sprintf("%d payments before fault %d", at, i), func() bool {
			return countRows(t, pool, "payments") >= at
		})
		time.Sleep(time.Duration(rng.Int64N(int64(200 * time.Millisecond)))) // the random instant, not a wait for a condition
		mu.Lock()
		victim := rng.IntN(len(live))
		cmd := live[victim]
		mu.Unlock()
		if rng.IntN(2) == 0 {
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			kills++
			mu.Lock()
			live[victim] = spawn()
			mu.Unlock()
			t.Logf("fault %d at %d payments: member %d killed", i, countRows(t, pool, "payments"), cmd.Process.Pid)
			continue
		}
		pause := time.Duration(rng.Int64N(int64(lockMS*time.Millisecond + 2*time.Second)))
		if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		t.Logf("fault %d at %d payments: member %d stopped for %v", i, countRows(t, pool, "payments"), cmd.Process.Pid, pause.Round(time.Millisecond))
		resumes.Add(1)
		time.AfterFunc(pause, func() {
			defer resumes.Done()
			_ = cmd.Process.Signal(syscall.SIGCONT)
		})
	}
	resumes.Wait()
	testenv.Eventually(t, 120*time.Second, "every record finished", func() bool {
		return unfinished(t, brokers, "billing", "payments", 2) == 0
	})
	for _, cmd := range live {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, cmd := range live {
		if err := cmd.Wait(); err != nil {
			t.Errorf("member %d: %v", cmd.Process.Pid, err)
		}
	}

	paid, started := countBy(t, pool, "payments"), countBy(t, pool, "handler_starts")
	store, err := redisstore.NewStore(rdb, consumer.WithPrefix(prefix), consumer.WithScope("payments"))
	if err != nil {
		t.Fatal(err)
	}
	excess, starts := 0, 0
	for _, ev := range events {
		rec, err := store.Peek(context.Background(), consumer.Key(ev.ID))
		if err != nil {
			t.Fatal(err)
		}
		starts += started[ev.ID]
		if paid[ev.ID] != 1 || started[ev.ID] < 1 || rec.State != "completed" || rec.Attempts < 1 {
			t.Errorf("event %s: %d payments rows, %d handler starts, store %s after %d attempts; want 1, at least 1, completed",
				ev.ID, paid[ev.ID], started[ev.ID], rec.State, rec.Attempts)
		}
		if d := rec.Attempts - started[ev.ID]; d > 0 {
			excess += d
			t.Logf("event %s: %d attempts, %d handler starts", ev.ID, rec.Attempts, started[ev.ID])
		}
	}
	if excess > kills*rkConcurrency {
		t.Errorf("%d attempts counted beyond the handler starts after %d kills; want at most %d", excess, kills, kills*rkConcurrency)
	}
	all := map[string]int{}
	maxCount := 0
	for i := 1; i <= names; i++ {
		for k, v := range stats(t, rdb, prefix, fmt.Sprintf("m%d", i)) {
			if k == "max_count" {
				maxCount = max(maxCount, v)
				continue
			}
			all[k] += v
		}
	}
	if dl := endOffsets(t, brokers, "payments.dlq"); dl != 0 || all["ack:accept/dead-lettered"] != 0 || all["near_limit"] != 0 || maxCount >= rkLimit-1 {
		t.Fatalf("%d dead letters, %d records near the delivery limit, highest delivery count %d; want 0, 0, below %d (%v)",
			dl, all["near_limit"], maxCount, rkLimit-1, all)
	}
	t.Logf("%d events (+%d duplicates), %d kills: %d handler starts, %d attempts beyond them, highest delivery count %d; acknowledgements %v",
		n, n/5, kills, starts, excess, maxCount, all)
}
