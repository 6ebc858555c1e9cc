package lock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/fence"
	"github.com/idemkit/idemkit/lock"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
)

// Environment of a holder process (this test binary run again by a test).
const (
	envHolder = "IDEMKIT_TEST_LOCK_HOLDER"
	envNodes  = "IDEMKIT_TEST_LOCK_NODES"
	envStore  = "IDEMKIT_TEST_STORE"
	envPrefix = "IDEMKIT_TEST_PREFIX"
	envDSN    = "IDEMKIT_TEST_DSN"
	envTable  = "IDEMKIT_TEST_TABLE"
)

const jobKey = consumer.Key("report-2026-q3")

// helperMain runs this binary as a job holder when a test asked for one.
func helperMain() bool {
	if os.Getenv(envHolder) == "" {
		return false
	}
	if err := runHolder(); err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		os.Exit(1)
	}
	os.Exit(0)
	return true
}

// jobSetup builds what holders and the test share: a locker over the lock nodes
// (1s expiry), a store whose record lease (30s) is far longer than the lock, and
// the fenced table.
func jobSetup(nodes []string, storeAddr, prefix string, tries int) (*lock.Locker, consumer.Store, func(), error) {
	var clients []redis.UniversalClient
	for _, a := range nodes {
		clients = append(clients, redis.NewClient(&redis.Options{Addr: a, DialTimeout: 200 * time.Millisecond, MaxRetries: -1}))
	}
	l, err := lock.New(clients, lock.WithExpiry(time.Second), lock.WithTries(tries), lock.WithRetryDelay(200*time.Millisecond))
	if err != nil {
		return nil, nil, nil, err
	}
	rdb := redis.NewClient(&redis.Options{Addr: storeAddr})
	store, err := redisstore.NewStore(rdb, consumer.WithPrefix(prefix), consumer.WithScope("reports"),
		consumer.WithLease(30*time.Second), consumer.WithLock(l))
	closeAll := func() {
		for _, c := range clients {
			_ = c.Close()
		}
		_ = rdb.Close()
	}
	return l, store, closeAll, err
}

// runHolder runs the report job: it marks that it started, works for 3 seconds
// without looking at its context (as a stalled or careless job would), then
// writes its result through the fence, and reports what happened.
func runHolder() error {
	_, store, closeAll, err := jobSetup(strings.Split(os.Getenv(envNodes), ","), os.Getenv(envStore), os.Getenv(envPrefix), 1)
	if err != nil {
		return err
	}
	defer closeAll()
	db, err := sql.Open("pgx", os.Getenv(envDSN))
	if err != nil {
		return err
	}
	defer db.Close()
	tbl := fence.Table{Name: os.Getenv(envTable)}
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(envStore)})
	defer rdb.Close()
	report := func(field, value string) {
		rdb.HSet(context.Background(), "{"+os.Getenv(envPrefix)+"}:holder", field, value)
	}
	r := consumer.ExecuteIdempotently(context.Background(), store, jobKey, nil, func(ctx context.Context) (string, error) {
		f, _ := consumer.FenceFromContext(ctx)
		report("fence", fmt.Sprint(f))
		report("started", "1")
		time.Sleep(3 * time.Second)
		report("ctx_cancelled", fmt.Sprint(ctx.Err() != nil))
		werr := tbl.Write(context.Background(), db, string(jobKey), f, []byte("holder"))
		switch {
		case errors.Is(werr, fence.ErrStale):
			report("write", "stale")
		case werr != nil:
			report("write", werr.Error())
		default:
			report("write", "ok")
		}
		return "holder", nil
	})
	report("outcome", r.Outcome.String())
	report("lease_lost", fmt.Sprint(errors.Is(r.Err, consumer.ErrLeaseLost)))
	return nil
}
