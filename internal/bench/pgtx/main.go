// Command pgtx measures transactional completion (make bench-postgres) against a
// private redis-server and the PostgreSQL of IDEMKIT_POSTGRES_DSN (default the
// local one), in a schema of its own, three repetitions of interleaved lanes of
// n messages each, one message at a time:
//
//   - plain transaction: BEGIN, INSERT the charge, COMMIT (no idemkit);
//   - InTx: the same transaction through postgres.InTx, which adds the completion
//     row (one statement);
//   - hybrid: ExecuteIdempotently on the Redis store with the InTx handler (the
//     claim and completion round trips to Redis plus the transaction);
//   - Redis store alone: ExecuteIdempotently with the plain transaction.
//
// It prints each lane's p50 and p99 latency per message and messages/s, and the
// transaction's p50 and p99 with InTx against without it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/postgres"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

func main() {
	n := flag.Int("n", 2000, "messages per lane")
	reps := flag.Int("reps", 3, "repetitions")
	flag.Parse()
	if err := run(*n, *reps); err != nil {
		fmt.Fprintln(os.Stderr, "bench-postgres:", err)
		os.Exit(1)
	}
}

type lane struct {
	name string
	lat  []time.Duration
	took time.Duration
}

func (l *lane) pct(p float64) time.Duration {
	s := slices.Clone(l.lat)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func run(n, reps int) error {
	ctx := context.Background()
	schema := "idemkit_bench_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	admin, err := pgxpool.New(ctx, testenv.PostgresDSN())
	if err != nil {
		return err
	}
	defer admin.Close()
	if _, err := admin.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		return fmt.Errorf("no PostgreSQL at IDEMKIT_POSTGRES_DSN or 127.0.0.1:5432: %w", err)
	}
	defer admin.Exec(context.WithoutCancel(ctx), `DROP SCHEMA `+schema+` CASCADE`)
	cfg, err := pgxpool.ParseConfig(testenv.PostgresDSN())
	if err != nil {
		return err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := postgres.Migrate(ctx, pool); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE charges (order_id text NOT NULL, amount int NOT NULL)`); err != nil {
		return err
	}
	addr, _, stop, err := testenv.RedisForTool()
	if err != nil {
		return err
	}
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()

	write := func(ctx context.Context, tx pgx.Tx, id string) (string, error) {
		_, err := tx.Exec(ctx, `INSERT INTO charges VALUES ($1, 42)`, id)
		return "ch_" + id, err
	}
	plainTx := func(ctx context.Context, id string) (string, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return "", err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		v, err := write(ctx, tx, id)
		if err != nil {
			return "", err
		}
		return v, tx.Commit(ctx)
	}
	fmt.Printf("idemkit PostgreSQL transactional completion bench: %d messages per lane, one at a time, %d repetitions\n", n, reps)
	for r := 1; r <= reps; r++ {
		store, err := consumer.NewRedisStore(rdb, consumer.WithPrefix("idemkit-bench-pg-"+strconv.Itoa(r)+"-"+schema), consumer.WithScope("bench"))
		if err != nil {
			return err
		}
		var inTxOnly, plainOnly []time.Duration
		lanes := []*lane{{name: "plain transaction"}, {name: "InTx (transaction + completion row)"},
			{name: "hybrid: Redis claims + InTx"}, {name: "Redis store alone + plain transaction"}}
		bodies := []func(i int) error{
			func(i int) error {
				_, err := plainTx(ctx, fmt.Sprint("p", r, "-", i))
				return err
			},
			nil, // InTx needs a handler's context: measured inside the hybrid lane below
			func(i int) error {
				id := fmt.Sprint("h", r, "-", i)
				res := consumer.ExecuteIdempotently(ctx, store, consumer.Key(id), nil, func(ctx context.Context) (string, error) {
					t := time.Now()
					v, err := postgres.InTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) (string, error) { return write(ctx, tx, id) })
					inTxOnly = append(inTxOnly, time.Since(t))
					return v, err
				})
				return res.Err
			},
			func(i int) error {
				id := fmt.Sprint("r", r, "-", i)
				res := consumer.ExecuteIdempotently(ctx, store, consumer.Key(id), nil, func(ctx context.Context) (string, error) {
					t := time.Now()
					v, err := plainTx(ctx, id)
					plainOnly = append(plainOnly, time.Since(t))
					return v, err
				})
				return res.Err
			},
		}
		// Interleaved in slices of 100 so that the machine's noise falls on every lane.
		for start := 0; start < n; start += 100 {
			for k, body := range bodies {
				if body == nil {
					continue
				}
				l := lanes[k]
				for i := start; i < min(start+100, n); i++ {
					t := time.Now()
					if err := body(i); err != nil {
						return fmt.Errorf("%s: %w", l.name, err)
					}
					d := time.Since(t)
					l.lat = append(l.lat, d)
					l.took += d
				}
			}
		}
		lanes[1].lat = inTxOnly
		for _, d := range inTxOnly {
			lanes[1].took += d
		}
		fmt.Printf("\nrepetition %d\n%-40s %10s %10s %10s\n", r, "lane", "p50 us", "p99 us", "msgs/s")
		for _, l := range lanes {
			fmt.Printf("%-40s %10d %10d %10.0f\n", l.name, l.pct(0.5).Microseconds(), l.pct(0.99).Microseconds(),
				float64(len(l.lat))/l.took.Seconds())
		}
		p := &lane{lat: plainOnly}
		tx := lanes[1]
		added := float64(tx.pct(0.5)-p.pct(0.5)) / float64(p.pct(0.5))
		verdict := "met"
		if added > 0.2 {
			verdict = "MISSED"
		}
		fmt.Printf("\n  the handler's transaction with InTx vs without (both inside ExecuteIdempotently): p50 %d vs %d us (+%.0f%%, <= 20%%: %s), p99 %d vs %d us\n",
			tx.pct(0.5).Microseconds(), p.pct(0.5).Microseconds(), added*100, verdict, tx.pct(0.99).Microseconds(), p.pct(0.99).Microseconds())
		fmt.Printf("  statements InTx adds to the transaction: 1 (INSERT ... ON CONFLICT DO NOTHING of the completion row)\n")
		fmt.Printf("  hybrid vs Redis store alone: %.2fx msgs/s\n", (float64(n)/lanes[2].took.Seconds())/(float64(n)/lanes[3].took.Seconds()))
	}
	return nil
}
