package postgres

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

const envStopOwner = "IDEMKIT_TEST_STOP_OWNER"

// stopOwner runs this test binary as the owner the test stops (SIGSTOP) in the
// middle of its transaction; it reports whether it did.
func stopOwner() bool {
	if os.Getenv(envStopOwner) == "" {
		return false
	}
	if err := runStopOwner(); err != nil {
		fmt.Fprintln(os.Stderr, "owner:", err)
		os.Exit(1)
	}
	os.Exit(0)
	return true
}

// runStopOwner charges pay-stop under a one-second lease: it writes the charge,
// says so in Redis, and sleeps before its completion, long enough to be stopped
// there. Its outcome goes to Redis.
func runStopOwner() error {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresDSN())
	if err != nil {
		return err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = os.Getenv(envSchema)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(envRedis)})
	defer rdb.Close()
	prefix := os.Getenv(envPrefix)
	store, err := redisstore.NewStore(rdb, consumer.WithPrefix(prefix), consumer.WithScope("payments"), consumer.WithLease(time.Second))
	if err != nil {
		return err
	}
	r := consumer.ExecuteIdempotently(ctx, store, "pay-stop", nil, func(ctx context.Context) (string, error) {
		return InTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) (string, error) {
			if _, err := tx.Exec(ctx, `INSERT INTO charges VALUES ('pay-stop', 1)`); err != nil {
				return "", err
			}
			rdb.Set(context.Background(), prefix+":written", "1", 0)
			time.Sleep(500 * time.Millisecond) // stopped here
			return "first", nil
		})
	})
	return rdb.Set(context.Background(), prefix+":outcome", fmt.Sprintf("%v %v", r.Outcome, r.Err), 0).Err()
}

// An owner stopped (SIGSTOP) between its business write and its completion, past
// its lease: another owner takes the key over and commits; the stopped one, once
// continued, cannot commit: one row.
func TestStoppedOwnerCannotCommit(t *testing.T) {
	pool := migrated(t)
	var schema string
	if err := pool.QueryRow(context.Background(), `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	child := testenv.StartSelf(t, envStopOwner+"=1", envRedis+"="+testenv.RedisAddr(t), envPrefix+"="+prefix, envSchema+"="+schema)
	ctx := context.Background()
	testenv.Eventually(t, 30*time.Second, "the owner to write its charge", func() bool {
		return rdb.Exists(ctx, prefix+":written").Val() == 1
	})
	if err := child.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	store, err := redisstore.NewStore(rdb, consumer.WithPrefix(prefix), consumer.WithScope("payments"), consumer.WithLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var r consumer.Result[string]
	testenv.Eventually(t, 30*time.Second, "the takeover after the stopped owner's lease", func() bool {
		r = consumer.ExecuteIdempotently(ctx, store, "pay-stop", nil, func(ctx context.Context) (string, error) {
			return InTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) (string, error) {
				_, err := tx.Exec(ctx, `INSERT INTO charges VALUES ('pay-stop', 1)`)
				return "second", err
			})
		})
		return r.Outcome != consumer.InProgress
	})
	if r.Outcome != consumer.Success || r.Value != "second" || r.Fence < 2 {
		t.Fatalf("takeover: %v %q fence %d %v", r.Outcome, r.Value, r.Fence, r.Err)
	}
	if err := child.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var outcome string
	testenv.Eventually(t, 30*time.Second, "the stopped owner to finish", func() bool {
		outcome = rdb.Get(ctx, prefix+":outcome").Val()
		return outcome != ""
	})
	if n := rows(t, pool, "charges")["pay-stop"]; n != 1 {
		t.Fatalf("%d charges, want 1 (the stopped owner's ended: %s)", n, outcome)
	}
	if outcome == fmt.Sprint(consumer.Success)+" <nil>" {
		t.Fatalf("the stopped owner reports SUCCESS")
	}
	t.Logf("the stopped owner ended with: %s", outcome)
}
