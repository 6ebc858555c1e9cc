package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idemkit/idemkit/adapters/kafka"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Environment of a member process (this test binary run again by a test).
const (
	envMember  = "IDEMKIT_TEST_KAFKA_MEMBER" // "kill" or "zombie"
	envBrokers = "IDEMKIT_TEST_KAFKA_BROKERS"
	envRedis   = "IDEMKIT_TEST_REDIS"
	envPrefix  = "IDEMKIT_TEST_PREFIX"
	envTrap    = "IDEMKIT_TEST_TRAP" // effects after which the member freezes
)

// helperMain runs this test binary as a group member process when a test asked
// for one (see process_test.go); it reports whether it did.
func helperMain() bool {
	mode := os.Getenv(envMember)
	if mode == "" {
		return false
	}
	if err := runMember(mode); err != nil {
		fmt.Fprintln(os.Stderr, "member:", err)
		os.Exit(1)
	}
	os.Exit(0)
	return true
}

// memberStats are what a member process reports in Redis, under its prefix.
func statsKey(prefix string) string { return "{" + prefix + "}:member-stats" }

// memberHooks observes a member's store and reports in Redis.
type memberHooks struct {
	rdb       *redis.Client
	prefix    string
	succeeded *atomic.Int64 // records settled SUCCESS: each one charged and recorded completed
}

func (h memberHooks) OnOutcome(e consumer.OutcomeEvent) {
	if e.Outcome == consumer.Success {
		h.succeeded.Add(1)
	}
}

// announceFreeze sets the frozen key once the member's charges are all recorded
// completed.
func announceFreeze(rdb *redis.Client, prefix string, succeeded *atomic.Int64, charged int64) {
	for succeeded.Load() < charged {
		time.Sleep(2 * time.Millisecond)
	}
	rdb.Set(context.Background(), "{"+prefix+"}:frozen", "1", 0)
}

func (h memberHooks) incr(field string) {
	h.rdb.HIncrBy(context.Background(), statsKey(h.prefix), field, 1)
}

func (h memberHooks) OnRetry(e consumer.RetryEvent) {
	if errors.Is(e.Err, consumer.ErrLeaseLost) {
		h.incr("lease_lost")
	}
}

func (h memberHooks) OnCommit(e consumer.CommitEvent) {
	if e.Err != nil {
		h.incr("commit_errors")
	}
}

func runMember(mode string) error {
	prefix := os.Getenv(envPrefix)
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(envRedis)})
	defer rdb.Close()
	hooks := memberHooks{rdb: rdb, prefix: prefix, succeeded: new(atomic.Int64)}
	store, err := redisstore.NewStore(rdb, consumer.WithPrefix(prefix), consumer.WithScope("payments"),
		consumer.WithLease(time.Second), consumer.WithObserver(hooks))
	if err != nil {
		return err
	}
	book := testenv.NewLedger(rdb, prefix)
	trap, _ := strconv.Atoi(os.Getenv(envTrap))
	// The member freezes once it has charged trap events: from then on its
	// handlers stop before their effect (a zombie's write it once it is continued
	// after a SIGSTOP, with its old fence). It announces the freeze only once every
	// event it charged is recorded completed, so that a kill or a stop then tests
	// the takeover of claims, not the window between an effect and its completion
	// that only transactional completion closes.
	var mu sync.Mutex
	var effects int64
	var frozen bool
	continued := make(chan struct{})
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGCONT)
	go func() { <-sigc; close(continued) }()
	handler := func(ctx context.Context, ev event, rec *kgo.Record) (string, error) {
		mu.Lock()
		if frozen {
			mu.Unlock()
			if mode == "kill" {
				<-ctx.Done() // claimed, never reaches its effect: the process is killed here
				return "", ctx.Err()
			}
			<-continued // zombie: writes anyway once resumed, with its old fence
			if _, err := book.Apply(context.WithoutCancel(ctx), ev.ID); err != nil {
				return "", err
			}
			return "ch_" + ev.ID, nil
		}
		_, err := book.Apply(ctx, ev.ID)
		if err == nil {
			hooks.incr("effects")
			if effects++; effects == int64(trap) {
				frozen = true
				go announceFreeze(rdb, prefix, hooks.succeeded, effects)
			}
		}
		mu.Unlock()
		if err != nil {
			return "", err
		}
		return "ch_" + ev.ID, nil
	}
	opts := groupOpts(strings.Split(os.Getenv(envBrokers), ","), "billing", "payments")
	opts = append(opts, kgo.SessionTimeout(time.Second), kgo.HeartbeatInterval(200*time.Millisecond), kgo.RebalanceTimeout(3*time.Second))
	c, err := kafka.NewTyped(store, opts, decodeEvent, handler,
		kafka.WithMaxPollRecords(50),
		kafka.WithOnLost(func(context.Context, *kgo.Client, map[string][]int32) { hooks.incr("lost") }))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	return c.Run(ctx)
}
