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
// transaction's p50 and p99 with InTx against without it; then the PostgreSQL
// Store's batch path (ExecuteBatch, B=100) against the same number of plain
// INSERT ... ON CONFLICT DO NOTHING and UPDATE statements, with the server's CPU,
// and the time-partitioned Store's beside them, with each lane's WAL bytes per
// message and the HOT share of each table's updates. With -store-only it runs
// only those batch lanes; -cpuprofile writes this process's CPU profile.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/benchkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/postgres"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

func main() {
	n := flag.Int("n", 2000, "messages per lane")
	reps := flag.Int("reps", 3, "repetitions")
	storeN := flag.Int("store-n", 20000, "messages per lane of the Store's batch lanes")
	storeOnly := flag.Bool("store-only", false, "run only the Store's batch lanes (ExecuteBatch against plain statements)")
	cpuProfile := flag.String("cpuprofile", "", "write this process's CPU profile to the file")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench-postgres:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if *storeOnly {
		*n = 0
	}
	if err := run(*n, *storeN, *reps); err != nil {
		pprof.StopCPUProfile()
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

func run(n, storeN, reps int) error {
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
		if n == 0 { // -store-only
			fmt.Printf("\nrepetition %d\n", r)
			if err := storeLanes(ctx, pool, r, storeN); err != nil {
				return err
			}
			continue
		}
		store, err := redisstore.NewStore(rdb, consumer.WithPrefix("idemkit-bench-pg-"+strconv.Itoa(r)+"-"+schema), consumer.WithScope("bench"))
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
		fmt.Printf("  statements InTx adds to the transaction: 1 (the completion row's INSERT, sent with the COMMIT: no round trip added)\n")
		fmt.Printf("  hybrid vs Redis store alone: %.2fx msgs/s\n", (float64(n)/lanes[2].took.Seconds())/(float64(n)/lanes[3].took.Seconds()))
		if err := storeLanes(ctx, pool, r, storeN); err != nil {
			return err
		}
	}
	return nil
}

// storeLanes compares the PostgreSQL Store's batch path (ExecuteBatch, B=100: one
// claim and one completion transaction per batch) with the same number of plain
// statements: per message an INSERT ... ON CONFLICT DO NOTHING and an UPDATE, each
// batch of 100 sent as one pgx batch of each. CPU is every postgres process's.
func storeLanes(ctx context.Context, pool *pgxpool.Pool, rep, n int) error {
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS plain_records (k text PRIMARY KEY, state text, result bytea)`); err != nil {
		return err
	}
	store, err := postgres.NewStore(pool, consumer.WithScope("bench-"+strconv.Itoa(rep)))
	if err != nil {
		return err
	}
	if _, _, err := postgres.MaintainPartitions(ctx, pool, postgres.Partitioning{Keep: 8 * 24 * time.Hour}); err != nil {
		return err
	}
	parted, err := postgres.NewPartitionedStore(pool, consumer.WithScope("bench-"+strconv.Itoa(rep)))
	if err != nil {
		return err
	}
	noop := func(context.Context, int, consumer.BatchItem) (string, error) { return "ok", nil }
	var storeTook, refTook, partTook, storeCPU, refCPU, partCPU time.Duration
	var storeWAL, refWAL int64
	// wal is the server's WAL insert position: the bytes between two readings are
	// every session's, this lane's and any other client's of the same server.
	wal := func() int64 {
		var lsn int64
		_ = pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint`).Scan(&lsn)
		return lsn
	}
	batch := func(s consumer.Store, prefix string, start int, took, cpu *time.Duration, walBytes *int64) error {
		items := make([]consumer.BatchItem, 0, 100)
		for i := start; i < min(start+100, n); i++ {
			items = append(items, consumer.BatchItem{Key: consumer.Key(fmt.Sprint(prefix, rep, "_", i))})
		}
		w0 := wal()
		c0, t := serverCPU(), time.Now()
		for _, res := range consumer.ExecuteBatch(ctx, s, items, noop) {
			if res.Outcome != consumer.Success {
				return fmt.Errorf("store lane: %v %v", res.Outcome, res.Err)
			}
		}
		*took, *cpu = *took+time.Since(t), *cpu+serverCPU()-c0
		*walBytes += wal() - w0
		return nil
	}
	// The first 100 of each lane are not counted: they prepare the statements on
	// the pool's connections.
	for start := -100; start < n; start += 100 {
		if start == 0 {
			storeTook, refTook, partTook, storeCPU, refCPU, partCPU = 0, 0, 0, 0, 0, 0
			storeWAL, refWAL = 0, 0
		}
		if err := batch(store, "s", start, &storeTook, &storeCPU, &storeWAL); err != nil {
			return err
		}
		var partWAL int64
		if err := batch(parted, "t", start, &partTook, &partCPU, &partWAL); err != nil {
			return err
		}

		w0 := wal()
		c0, t := serverCPU(), time.Now()
		var ins, upd pgx.Batch
		for i := start; i < min(start+100, n); i++ {
			k := fmt.Sprint("p", rep, "_", i)
			ins.Queue(`INSERT INTO plain_records (k, state) VALUES ($1, 'started') ON CONFLICT DO NOTHING`, k)
			upd.Queue(`UPDATE plain_records SET state = 'completed', result = $2 WHERE k = $1`, k, []byte("ok"))
		}
		for _, b := range []*pgx.Batch{&ins, &upd} {
			if err := pool.SendBatch(ctx, b).Close(); err != nil {
				return err
			}
		}
		refTook, refCPU = refTook+time.Since(t), refCPU+serverCPU()-c0
		refWAL += wal() - w0
	}
	sr, rr := float64(n)/storeTook.Seconds(), float64(n)/refTook.Seconds()
	verdict := "met"
	if sr < 0.8*rr {
		verdict = "MISSED"
	}
	fmt.Printf("  PostgreSQL Store, ExecuteBatch B=100: %.0f msgs/s, server CPU %.1f us/msg; plain INSERT ON CONFLICT + UPDATE, pgx batches of 100: %.0f msgs/s, %.1f us/msg; ratio %.2fx (>= 0.8x: %s); server CPU %.2fx\n",
		sr, float64(storeCPU.Microseconds())/float64(n), rr, float64(refCPU.Microseconds())/float64(n), sr/rr, verdict, float64(storeCPU)/float64(refCPU))
	fmt.Printf("  per message: WAL %d bytes (Store) vs %d (reference); round trips per batch of 100: 2 (Store: the claim's insert, the completion's update) vs 2 (reference: one pgx batch of 100 INSERTs, one of 100 UPDATEs, each one implicit transaction)\n",
		storeWAL/int64(n), refWAL/int64(n))
	if line, err := hotUpdates(ctx, pool); err == nil {
		fmt.Printf("  %s\n", line)
	}
	pr := float64(n) / partTook.Seconds()
	fmt.Printf("  partitioned Store (daily windows), ExecuteBatch B=100: %.0f msgs/s, server CPU %.1f us/msg; %.2fx the plain Store, %.2fx the reference\n",
		pr, float64(partCPU.Microseconds())/float64(n), pr/sr, pr/rr)
	return nil
}

// hotUpdates says, for the Store's table and the reference's, how many updates so
// far were heap-only (HOT: no index written), and how many indexes each has. The
// server reports these counts with up to a second's delay.
func hotUpdates(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var out []string
	for _, table := range []string{"idemkit_records", "plain_records"} {
		var upd, hot, idx int64
		err := pool.QueryRow(ctx, `SELECT s.n_tup_upd, s.n_tup_hot_upd, (SELECT count(*) FROM pg_index i WHERE i.indrelid = s.relid)
			FROM pg_stat_user_tables s WHERE s.relid = to_regclass($1)`, table).Scan(&upd, &hot, &idx)
		if err != nil {
			return "", err
		}
		out = append(out, fmt.Sprintf("%s: %d indexes, %d of %d updates HOT", table, idx, hot, upd))
	}
	return strings.Join(out, "; "), nil
}

// serverCPU is the CPU time of every local postgres process (0 when none is seen).
func serverCPU() time.Duration {
	out, err := exec.Command("pgrep", "-x", "postgres").Output()
	if err != nil {
		return 0
	}
	var total time.Duration
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			total += benchkit.CPUTime(pid)
		}
	}
	return total
}
