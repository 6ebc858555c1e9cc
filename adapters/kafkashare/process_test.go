package kafkashare_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/kafkashare"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Environment of a member process (this test binary run again by a test).
const (
	envMember  = "IDEMKIT_TEST_SHARE_MEMBER" // the member's name
	envBrokers = "IDEMKIT_TEST_SHARE_BROKERS"
	envRedis   = "IDEMKIT_TEST_REDIS"
	envPrefix  = "IDEMKIT_TEST_PREFIX"
	envTrap    = "IDEMKIT_TEST_TRAP" // "1": once the test says so, the member's handlers block before their effect
	// The member commits its effects with postgres.InTx in this database and
	// schema instead of the Redis ledger (randomkill_test.go).
	envPostgres = "IDEMKIT_TEST_POSTGRES"
	envSchema   = "IDEMKIT_TEST_SCHEMA"
)

func statsKey(prefix, member string) string { return "{" + prefix + "}:share-stats:" + member }

// helperMain runs this test binary as a share-group member when a test asked for
// one; it reports whether it did.
func helperMain() bool {
	name := os.Getenv(envMember)
	if name == "" {
		return false
	}
	run := runMember
	if os.Getenv(envPostgres) != "" {
		run = runTxMember
	}
	if err := run(name); err != nil {
		fmt.Fprintln(os.Stderr, "member:", err)
		os.Exit(1)
	}
	os.Exit(0)
	return true
}

// memberStats counts, in Redis, what a member process saw.
type memberStats struct {
	rdb     *redis.Client
	key     string
	pending *sync.Map // "key/fence" of the attempts whose effect may be made and which are not settled yet
}

func (s memberStats) incr(field string) { s.rdb.HIncrBy(context.Background(), s.key, field, 1) }

func (s memberStats) OnShareAction(e kafkashare.ShareActionEvent) {
	if e.Status != kgo.AckRenew {
		s.incr("ack:" + e.Status.String() + "/" + e.Reason)
	}
	s.rdb.Eval(context.Background(), `if tonumber(redis.call('HGET', KEYS[1], 'max_count') or '0') < tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'max_count', ARGV[1]) end`, []string{s.key}, e.DeliveryCount)
}

func (s memberStats) OnShareAck(e kafkashare.ShareAckEvent) {
	if e.Err != nil {
		s.incr("ack_refused")
	}
}

func (s memberStats) OnDeliveryLimitNear(kafkashare.ShareActionEvent) { s.incr("near_limit") }

func (s memberStats) OnOutcome(e consumer.OutcomeEvent) {
	switch e.Outcome {
	case consumer.InProgress:
		s.incr("in_progress")
	case consumer.Success, consumer.Duplicate:
	default:
		s.incr("outcome:" + e.Outcome.String() + "/" + e.Kind)
	}
	if e.Outcome != consumer.InProgress && e.Outcome != consumer.Duplicate && s.pending != nil {
		s.pending.Delete(pendingKey(string(e.Key), e.Fence)) // this attempt settled, whatever its outcome
	}
}

func runMember(name string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(envRedis)})
	defer rdb.Close()
	prefix := os.Getenv(envPrefix)
	stats := memberStats{rdb: rdb, key: statsKey(prefix, name), pending: new(sync.Map)}
	doomed := os.Getenv(envTrap) == "1"
	var freezing atomic.Bool
	var frozen atomic.Int64 // handlers blocked, holding their claims
	if doomed {
		// Once the test sets the freeze key, every handler that starts blocks
		// before its effect, holding its claim; once every attempt that may
		// have made its effect is settled (recorded completed, or failed) and
		// a handler holds its claim, tell the test, which kills or stops this
		// process with no effect between its write and its completion.
		go func() {
			for ctx.Err() == nil && rdb.Exists(ctx, freezeKey(prefix)).Val() == 0 {
				time.Sleep(5 * time.Millisecond)
			}
			freezing.Store(true)
			for ctx.Err() == nil && (!mapEmpty(stats.pending) || frozen.Load() == 0) {
				time.Sleep(2 * time.Millisecond)
			}
			rdb.Set(context.Background(), frozenKey(prefix, name), "1", 0)
		}()
	}
	book := testenv.NewLedger(rdb, prefix)
	// The lease is given seconds: a claim lost between the effect and its
	// completion lets another member make the effect again, and a 1s lease
	// renewed every third of it leaves little room on a busy 2-core machine
	// (its renewals wait for a Redis that shares the cores with the race
	// detector and a CPU hog).
	store, err := redisstore.NewStore(rdb, consumer.WithPrefix(prefix), consumer.WithScope("payments"),
		consumer.WithLease(5*time.Second), consumer.WithObserver(stats))
	if err != nil {
		return err
	}
	c, err := kafkashare.NewTyped(store, shareOpts(strings.Split(os.Getenv(envBrokers), ","), "billing", "payments"),
		decodeEvent, func(ctx context.Context, ev event, _ *kgo.Record) (int, error) {
			// Pending from its start until its outcome, so the freeze never falls
			// between an effect and its settlement: a handler either counts as
			// pending before the freeze looks, or sees the freeze and blocks.
			info, _ := consumer.InfoFromContext(ctx)
			pk := pendingKey(ev.ID, info.Fence)
			stats.pending.Store(pk, true)
			if freezing.Load() {
				stats.pending.Delete(pk)
				frozen.Add(1)
				<-ctx.Done()
				return 0, ctx.Err()
			}
			time.Sleep(2 * time.Millisecond) // the payment provider
			effective, err := book.Apply(ctx, ev.ID)
			if err != nil {
				return 0, err
			}
			if !effective { // refused as stale: another owner has the key, nothing was charged
				return 0, errors.New("ledger write refused: the claim was taken over")
			}
			stats.incr("effects")
			return ev.Amount, nil
		}, kafkashare.WithMaxPollRecords(50), kafkashare.WithConcurrency(32),
		kafkashare.WithAcquisitionMargin(500*time.Millisecond), kafkashare.WithBusyHold(5*time.Minute))
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

func pendingKey(key string, fence int64) string { return key + "/" + strconv.FormatInt(fence, 10) }

func mapEmpty(m *sync.Map) bool {
	empty := true
	m.Range(func(any, any) bool { empty = false; return false })
	return empty
}

// freezeKey, once set, freezes the doomed members (envTrap).
func freezeKey(prefix string) string { return "{" + prefix + "}:freeze" }

func frozenKey(prefix, member string) string { return "{" + prefix + "}:frozen:" + member }

// startMember runs this test binary as the share-group member name of group
// "billing" on topic "payments", with its statistics under prefix in the test's
// Redis, and env added (envTrap, envPostgres...). It is killed and reaped when t
// ends.
func startMember(t *testing.T, brokers []string, prefix, name string, env ...string) *exec.Cmd {
	t.Helper()
	return testenv.StartSelf(t, append([]string{envMember + "=" + name, envBrokers + "=" + strings.Join(brokers, ","),
		envRedis + "=" + testenv.RedisAddr(t), envPrefix + "=" + prefix}, env...)...)
}

func stats(t *testing.T, rdb *redis.Client, prefix, member string) map[string]int {
	t.Helper()
	all, err := rdb.HGetAll(context.Background(), statsKey(prefix, member)).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for k, v := range all {
		out[k], _ = strconv.Atoi(v)
	}
	return out
}

// Three member processes share two partitions; one is killed (SIGKILL) and one
// stopped (SIGSTOP) past the acquisition lock while they hold records. The
// survivor finishes everything while the stopped member is still stopped (so the
// stopped member's locks ran out and its records came back), every event is
// charged exactly once, nothing is left acquired, no record neared its delivery
// limit (none archived), a busy key was never released, and the resumed member
// cancels the handlers it held past their locks and releases their records
// (uncounted attempts; the broker has given them to the survivor already).
func TestShareMembersKilledAndStopped(t *testing.T) {
	n := 10000
	if testing.Short() {
		n = 2000 // the full run takes about a minute under -race on a busy 2-core machine
	}
	brokers := shareCluster(t, 2, "payments", "payments.dlq")
	startAtEarliest(t, brokers, "billing")
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	book := testenv.NewLedger(rdb, prefix)
	events := produce(t, brokers, "payments", n, 0.2)
	member := func(name string, doomed bool) *os.Process {
		trap := ""
		if doomed {
			trap = "1"
		}
		return startMember(t, brokers, prefix, name, envTrap+"="+trap).Process
	}
	killed, stopped, survivor := member("killed", true), member("stopped", true), member("survivor", false)
	t.Cleanup(func() {
		if t.Failed() {
			for _, m := range []string{"killed", "stopped", "survivor"} {
				t.Logf("%s: %v", m, stats(t, rdb, prefix, m))
			}
		}
	})
	// Both doomed members freeze at one moment, which the test picks once each
	// made n/40 effects: a member frozen alone holds keys whose duplicates the
	// others hold busy for up to WithBusyHold, and a poll waits for its every
	// record, so on a loaded machine the other doomed member, a few effects
	// behind, would stall short of a trap of its own.
	testenv.Eventually(t, 120*time.Second, "the two doomed members to make their first effects", func() bool {
		return stats(t, rdb, prefix, "killed")["effects"] >= n/40 && stats(t, rdb, prefix, "stopped")["effects"] >= n/40
	})
	if err := rdb.Set(context.Background(), freezeKey(prefix), "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 120*time.Second, "the two doomed members to freeze mid-run, holding claimed records", func() bool {
		return rdb.Exists(context.Background(), frozenKey(prefix, "killed"), frozenKey(prefix, "stopped")).Val() == 2
	})
	if err := killed.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := stopped.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stoppedAt := time.Now()
	testenv.Eventually(t, 180*time.Second, "the survivor to finish every record while the stopped member sleeps", func() bool {
		return unfinished(t, brokers, "billing", "payments", 2) == 0
	})
	t.Logf("every record finished %v after the stop", time.Since(stoppedAt))
	if err := stopped.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "the resumed member to give back the records it held", func() bool {
		return stats(t, rdb, prefix, "stopped")["ack:release/interrupted"] > 0
	})
	for _, p := range []*os.Process{stopped, survivor} {
		_ = p.Signal(syscall.SIGTERM)
	}
	if left := unfinished(t, brokers, "billing", "payments", 2); left != 0 {
		t.Fatalf("%d records unfinished after the members ended", left)
	}
	counts, stale := book.Counts(t)
	for _, ev := range events {
		if counts[ev.ID] != 1 {
			t.Errorf("event %s charged %d times, want 1", ev.ID, counts[ev.ID])
		}
	}
	all := map[string]int{}
	maxCount := 0
	for _, m := range []string{"killed", "stopped", "survivor"} {
		s := stats(t, rdb, prefix, m)
		t.Logf("%s: %v", m, s)
		for k, v := range s {
			if k == "max_count" {
				maxCount = max(maxCount, v)
				continue
			}
			all[k] += v
		}
	}
	if all["ack:release/busy"] != 0 || all["near_limit"] != 0 || maxCount >= 4 {
		t.Fatalf("busy releases %d, records near the delivery limit %d, highest delivery count %d; want 0, 0, < 4",
			all["ack:release/busy"], all["near_limit"], maxCount)
	}
	if all["ack:accept/dead-lettered"] != 0 || all["ack:reject/broker-dead-letter"] != 0 {
		t.Fatalf("records dead-lettered or rejected: %v", all)
	}
	t.Logf("%d events (+%d duplicates): %d stale writes refused, %d IN_PROGRESS answers, %d refused acks, highest delivery count %d",
		n, n/5, stale, all["in_progress"], all["ack_refused"], maxCount)
}
