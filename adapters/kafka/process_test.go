package kafka_test

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/kafka"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
)

// startProcess runs this test binary as a member process.
func startProcess(t *testing.T, mode string, brokers []string, prefix string, trap int) *exec.Cmd {
	t.Helper()
	return testenv.StartSelf(t, envMember+"="+mode, envBrokers+"="+strings.Join(brokers, ","),
		envRedis+"="+testenv.RedisAddr(t), envPrefix+"="+prefix, envTrap+"="+strconv.Itoa(trap))
}

// memberRun publishes n events (a fifth twice) and starts a member process in
// mode that freezes after 300 effects; it returns once the process has frozen.
type memberRun struct {
	brokers []string
	rdb     redis.UniversalClient
	prefix  string
	book    *testenv.Ledger
	events  []event
	child   *exec.Cmd
}

func startMemberRun(t *testing.T, mode string, n int) memberRun {
	t.Helper()
	r := memberRun{rdb: testenv.Redis(t), prefix: testenv.Prefix(t)}
	r.brokers, _ = testenv.Kafka(t, 8, "payments", "payments.dlq")
	r.book = testenv.NewLedger(r.rdb, r.prefix)
	r.events = produce(t, r.brokers, "payments", n, 0.2)
	r.child = startProcess(t, mode, r.brokers, r.prefix, 300)
	testenv.Eventually(t, 60*time.Second, "the member process to freeze with claims in flight", func() bool {
		return r.rdb.Exists(context.Background(), "{"+r.prefix+"}:frozen").Val() == 1
	})
	return r
}

// survivor is an in-process member of the same group, with the same store.
func survivor(t *testing.T, brokers []string, rdb redis.UniversalClient, prefix string, book *testenv.Ledger) *member {
	store, err := redisstore.NewStore(rdb, consumer.WithPrefix(prefix), consumer.WithScope("payments"),
		consumer.WithLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	opts := append(groupOpts(brokers, "billing", "payments"), kgo.SessionTimeout(time.Second),
		kgo.HeartbeatInterval(200*time.Millisecond), kgo.RebalanceTimeout(3*time.Second))
	c, err := kafka.NewTyped(store, opts, decodeEvent, charge(book), kafka.WithMaxPollRecords(50))
	if err != nil {
		t.Fatal(err)
	}
	return startMember(t, c)
}

func memberStats(t *testing.T, rdb redis.UniversalClient, prefix string) map[string]int {
	all, err := rdb.HGetAll(context.Background(), statsKey(prefix)).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for k, v := range all {
		out[k], _ = strconv.Atoi(v)
	}
	return out
}

func checkExactlyOnce(t *testing.T, book *testenv.Ledger, events []event) map[string]int {
	t.Helper()
	counts, _ := book.Counts(t)
	for _, ev := range events {
		if counts[ev.ID] != 1 {
			t.Errorf("event %s charged %d times, want 1", ev.ID, counts[ev.ID])
		}
	}
	return counts
}

// A member process killed (SIGKILL) while it holds claimed records and uncommitted
// offsets: the survivor re-consumes its partitions, takes its claims over when
// their leases run out, and every event is charged exactly once.
func TestMemberKilledMidBatch(t *testing.T) {
	run := startMemberRun(t, "kill", 2000)
	brokers, rdb, prefix, book, events, child := run.brokers, run.rdb, run.prefix, run.book, run.events, run.child
	survivor(t, brokers, rdb, prefix, book)
	time.Sleep(300 * time.Millisecond) // handlers past their effect finish; the rest wait, claimed
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()

	testenv.Eventually(t, 90*time.Second, "every offset committed", func() bool {
		l, _ := lag(t, brokers, "billing", "payments")
		return l == 0
	})
	checkExactlyOnce(t, book, events)
	stats := memberStats(t, rdb, prefix)
	fences, _ := rdb.HGetAll(context.Background(), book.Fences).Result()
	takenOver := 0
	for _, f := range fences {
		if f != "1" {
			takenOver++
		}
	}
	if stats["effects"] < 300 || takenOver == 0 {
		t.Fatalf("the killed member charged %d events and %d claims were taken over; want >= 300 and > 0",
			stats["effects"], takenOver)
	}
	t.Logf("killed member charged %d events; %d of its claims were taken over", stats["effects"], takenOver)
}

// A member process stopped (SIGSTOP) past its session timeout while holding
// claimed records, then resumed: the survivor took its partitions and claims over;
// its late writes carry a stale fence and are rejected, its completions get
// LEASE_LOST and its commits fail. Every event is charged exactly once.
func TestZombieMemberIsFencedOut(t *testing.T) {
	run := startMemberRun(t, "zombie", 2000)
	brokers, rdb, prefix, book, events, child := run.brokers, run.rdb, run.prefix, run.book, run.events, run.child
	if err := child.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	survivor(t, brokers, rdb, prefix, book)
	testenv.Eventually(t, 90*time.Second, "the survivor to commit every offset", func() bool {
		l, _ := lag(t, brokers, "billing", "payments")
		return l == 0
	})
	if err := child.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the zombie's late completions to be refused", func() bool {
		s := memberStats(t, rdb, prefix)
		return s["lease_lost"] > 0 && (s["commit_errors"] > 0 || s["lost"] > 0)
	})
	_ = child.Process.Signal(syscall.SIGTERM)
	_ = child.Wait()

	if l, _ := lag(t, brokers, "billing", "payments"); l != 0 {
		t.Fatalf("lag %d after the zombie ended: it must not move committed offsets back", l)
	}
	checkExactlyOnce(t, book, events)
	_, stale := book.Counts(t)
	stats := memberStats(t, rdb, prefix)
	if stale == 0 {
		t.Fatal("no stale write was rejected: the zombie never wrote after resuming")
	}
	t.Logf("zombie: %d stale writes rejected, %d LEASE_LOST, %d commit errors, %d partition losses",
		stale, stats["lease_lost"], stats["commit_errors"], stats["lost"])
}
