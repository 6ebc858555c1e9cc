// Command long-job generates monthly reports from a job queue with two workers,
// guarded by a distributed lock (package lock) and fenced writes to PostgreSQL
// (package fence). The queue delivers some jobs twice, and a job takes a few
// seconds: a second worker that receives a running job is told IN_PROGRESS and
// moves on; one that receives a finished job gets its stored result.
//
// Each report is owned by its idempotency key ("report:<month>"): its row is keyed
// by that key, which is what makes the fence meaningful. A fence orders the
// attempts of one key; it cannot order different keys' writes to a shared row.
//
// The lock runs on three independent Redis nodes (a quorum of two): in-process
// ones by default, or IDEMKIT_LOCK_NODES=host:port,host:port,host:port. The store is
// in-process too unless IDEMKIT_REDIS_ADDR is set. PostgreSQL is IDEMKIT_POSTGRES_DSN
// or postgres://postgres@127.0.0.1:5432/test (make up starts neither: any
// PostgreSQL will do).
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/fence"
	"github.com/idemkit/idemkit/lock"
	redisstore "github.com/idemkit/idemkit/store/redis"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"
)

var reports = fence.Table{Name: "idemkit_example_reports"}

// stepTime is how long each of a report's four steps of work takes.
var stepTime = 500 * time.Millisecond

// generate builds a report in steps, stopping as soon as its lock is lost, and
// stores it in the row its key owns through the fence, so that a worker that lost
// the job cannot overwrite the report of the worker that took it over.
func generate(db *sql.DB) func(ctx context.Context, key consumer.Key, month string) (string, error) {
	return func(ctx context.Context, key consumer.Key, month string) (string, error) {
		f, _ := consumer.FenceFromContext(ctx)
		for step := 0; step < 4; step++ { // ~2s of work
			select {
			case <-ctx.Done():
				return "", context.Cause(ctx)
			case <-time.After(stepTime):
			}
		}
		body := fmt.Sprintf("revenue report for %s (fence %d)", month, f)
		if err := reports.Write(context.WithoutCancel(ctx), db, string(key), f, []byte(body)); err != nil {
			if errors.Is(err, fence.ErrStale) {
				return "", consumer.Permanent(err) // a newer attempt wrote it: this one is obsolete
			}
			return "", err
		}
		return body, nil
	}
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "long-job:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	dsn := os.Getenv("IDEMKIT_POSTGRES_DSN")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		return fmt.Errorf("cannot reach PostgreSQL at %s (set IDEMKIT_POSTGRES_DSN): %w", dsn, err)
	}
	if err := reports.Create(ctx, db); err != nil {
		return err
	}

	var nodes []redis.UniversalClient
	addrs := strings.Split(os.Getenv("IDEMKIT_LOCK_NODES"), ",")
	if os.Getenv("IDEMKIT_LOCK_NODES") == "" {
		addrs = nil
		for i := 0; i < 3; i++ {
			m, err := miniredis.Run()
			if err != nil {
				return err
			}
			defer m.Close()
			addrs = append(addrs, m.Addr())
		}
	}
	for _, a := range addrs {
		// ContextTimeoutEnabled: a call the lock gives up on also stops in the client.
		c := redis.NewClient(&redis.Options{Addr: a, DialTimeout: 500 * time.Millisecond, ContextTimeoutEnabled: true})
		defer c.Close()
		nodes = append(nodes, c)
	}
	storeAddr := os.Getenv("IDEMKIT_REDIS_ADDR")
	if storeAddr == "" {
		m, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer m.Close()
		storeAddr = m.Addr()
	}

	// --- the wiring: a locker, a store that uses it, a handler ---
	locker, err := lock.New(nodes, lock.WithExpiry(3*time.Second), lock.WithTries(1))
	if err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: storeAddr})
	defer rdb.Close()
	store, err := redisstore.NewStore(rdb, consumer.WithScope("reports"), consumer.WithLock(locker),
		consumer.WithLease(time.Minute), consumer.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return err
	}
	job := generate(db)
	// --- end of the wiring ---

	stamp := time.Now().Format("150405")
	months := []string{"2026-07", "2026-08", "2026-09", "2026-10"}
	queue := make(chan string, 16)
	for _, m := range append(months, months[1], months[3], months[1]) { // some jobs arrive twice
		queue <- m + "-" + stamp
	}
	close(queue)
	var mu sync.Mutex
	lines := []string{}
	var wg sync.WaitGroup
	for w := 1; w <= 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for month := range queue {
				key := consumer.Key("report:" + month)
				r := consumer.ExecuteIdempotently(ctx, store, key, []byte(month),
					func(ctx context.Context) (string, error) { return job(ctx, key, month) })
				line := fmt.Sprintf("  worker %d  %-18s %-11s fence %d", w, month, r.Outcome, r.Fence)
				if r.Err != nil {
					line += "  " + r.Err.Error()
				}
				mu.Lock()
				lines = append(lines, line)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	fmt.Println("jobs:")
	for _, l := range lines {
		fmt.Println(l)
	}
	fmt.Println("\nreports in PostgreSQL:")
	for _, m := range months {
		v, f, writes, _, err := reports.Read(ctx, db, "report:"+m+"-"+stamp)
		if err != nil {
			return err
		}
		fmt.Printf("  %-18s fence %d, %d write(s): %s\n", m+"-"+stamp, f, writes, v)
	}
	return nil
}
