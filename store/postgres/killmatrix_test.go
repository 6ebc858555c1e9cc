package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/kafka"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// envKillMember makes this test binary a payments member of the random-kill
// matrix (the other settings come in the crash matrix's variables).
const envKillMember = "IDEMKIT_TEST_KILL_MEMBER"

// The random-kill matrix's shape.
const (
	killOrders = 1000 // payments, a fifth of them published twice
	killRounds = 10   // members SIGKILLed, one after another
	// killSpread is the range of the random moment, after the member's first
	// handler start, at which it is killed: a member holds the most claims early.
	killSpread = 500 * time.Millisecond
)

// killMember runs this test binary as a member of the random-kill matrix when a
// test asked for one; it reports whether it did. The member never stops by itself:
// the test kills it.
func killMember() bool {
	if os.Getenv(envKillMember) == "" {
		return false
	}
	err := runKillMember(context.Background(), os.Getenv(envStore), os.Getenv(envBrokers), os.Getenv(envRedis),
		os.Getenv(envPrefix), os.Getenv(envSchema))
	if err != nil {
		fmt.Fprintln(os.Stderr, "kill-matrix member:", err)
		os.Exit(1)
	}
	os.Exit(0)
	return true
}

// runKillMember consumes the payments topic as a demanding user would: three
// handlers, a one-second lease, the default attempts, each payment a row written
// by 2-8 ms of work inside InTx. Every handler start is written down first, in
// its own transaction, so that the test can tell a record that never ran.
func runKillMember(ctx context.Context, storeKind, brokers, redisAddr, prefix, schema string) error {
	ch, err := newCharger(ctx, "", storeKind, redisAddr, prefix, schema)
	if err != nil {
		return err
	}
	defer ch.close()
	pid := os.Getpid()
	pay := func(ctx context.Context, p payment, _ *kgo.Record) (string, error) {
		if _, err := ch.pool.Exec(ctx, `INSERT INTO handler_starts VALUES ($1, $2)`, p.ID, pid); err != nil {
			return "", err
		}
		return InTx(ctx, ch.pool, func(ctx context.Context, tx pgx.Tx) (string, error) {
			work := time.NewTimer(time.Duration(2+rand.IntN(7)) * time.Millisecond)
			defer work.Stop()
			select {
			case <-work.C:
			case <-ctx.Done():
				return "", ctx.Err()
			}
			if _, err := tx.Exec(ctx, `INSERT INTO payments VALUES ($1, $2)`, p.ID, p.Amount); err != nil {
				return "", err
			}
			return "ch_" + p.ID, nil
		})
	}
	c, err := kafka.NewTyped(ch.store, []kgo.Opt{kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.ConsumerGroup("payments"),
		kgo.ConsumeTopics("payments"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.SessionTimeout(time.Second), kgo.HeartbeatInterval(200 * time.Millisecond),
		// A member killed while it joins is waited for until the rebalance times
		// out (60 s by default); this one is still longer than the revoke drain.
		kgo.RebalanceTimeout(6 * time.Second)},
		func(rec *kgo.Record) (payment, error) {
			var p payment
			return p, json.Unmarshal(rec.Value, &p)
		}, pay, kafka.WithConcurrency(3))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM)
	defer stop()
	return c.Run(ctx)
}

// The random-kill matrix: 1,000 payments (200 of them published twice) on four
// partitions, consumed by members that are SIGKILLed one after another at a random
// moment of their work (uniformly within half a second of their first handler start),
// ten rounds, a fresh member each round, then a survivor drains the group. Every payment has exactly one row, its handler ran, and
// nothing is dead-lettered: a crash never uses up the attempts of a record it did
// not run. With the claims in Redis and with the PostgreSQL Store alone, InTx
// either way, the default attempts. A failure says how many orders have no row,
// more than one, or never ran, and what each dead letter's copy and the store say
// (kind, state, attempts, error). IDEMKIT_CRASH_REPEAT sets the repetitions per
// store (default 2; the long run is 20).
func TestRandomKillMatrix(t *testing.T) {
	reps, _ := strconv.Atoi(os.Getenv("IDEMKIT_CRASH_REPEAT"))
	if reps < 1 {
		reps = 2
	}
	for _, storeKind := range []string{"redis", "postgres"} {
		for rep := range reps {
			t.Run(fmt.Sprintf("%s/%d", storeKind, rep), func(t *testing.T) {
				t.Parallel() // a run mostly waits (sessions, leases, the kills), so -parallel of them share the time
				killMatrixRun(t, storeKind)
			})
		}
	}
}

func killMatrixRun(t *testing.T, storeKind string) {
	pool := migrated(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE payments (order_id text NOT NULL, amount int NOT NULL);
		CREATE TABLE handler_starts (order_id text NOT NULL, pid int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	var schema string
	if err := pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	brokers, _ := testenv.Kafka(t, 4, "payments", "payments.dlq")
	publishPayments(t, brokers, killOrders)
	prefix, redisAddr := testenv.Prefix(t), testenv.RedisAddr(t)
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, seed))
	t.Logf("seed %d", seed)
	for round := range killRounds {
		child := testenv.StartSelf(t, envKillMember+"=1", envStore+"="+storeKind, envBrokers+"="+strings.Join(brokers, ","),
			envRedis+"="+redisAddr, envPrefix+"="+prefix, envSchema+"="+schema)
		pid, spawned := child.Process.Pid, time.Now()
		// The member is at work once it started a handler; when nothing is left to
		// do it never will, and it is killed all the same.
		testenv.Eventually(t, time.Minute, fmt.Sprintf("member %d of round %d to start a handler", pid, round), func() bool {
			if exited(t, pid) {
				t.Fatalf("member %d of round %d ended by itself", pid, round)
			}
			return startsBy(t, pool, pid) > 0 || lag(t, brokers) == 0
		})
		working := time.Since(spawned)
		at := time.Duration(rng.Int64N(int64(killSpread)))
		time.Sleep(at) // the random moment of the crash, not a wait for a condition
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if !killedWithin(pid, time.Minute) {
			t.Fatalf("member %d of round %d did not die of SIGKILL", pid, round)
		}
		t.Logf("round %d: member %d at work after %v, killed %v later, having started %d handlers",
			round, pid, working.Round(time.Millisecond), at.Round(time.Millisecond), startsBy(t, pool, pid))
	}
	draining := time.Now()
	survivor, cancel := context.WithCancel(ctx)
	var survivorErr error
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		survivorErr = runKillMember(survivor, storeKind, strings.Join(brokers, ","), redisAddr, prefix, schema)
	}()
	t.Cleanup(func() { cancel(); <-ended }) // before the cluster closes, on failure too
	for deadline := time.Now().Add(3 * time.Minute); lag(t, brokers) != 0; time.Sleep(100 * time.Millisecond) {
		select {
		case <-ended:
			t.Fatalf("the survivor ended early: %v", survivorErr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the survivor did not commit every offset in 3m (lag %d); what the rows and the store say: %s",
				lag(t, brokers), killVerdict(t, pool, brokers, storeKind, redisAddr, prefix, schema))
		}
	}
	cancel()
	<-ended
	if survivorErr != nil {
		t.Fatal(survivorErr)
	}
	t.Logf("the survivor drained the group in %v", time.Since(draining).Round(time.Millisecond))
	if v := killVerdict(t, pool, brokers, storeKind, redisAddr, prefix, schema); v != "" {
		t.Fatal(v)
	}
}

// exited reports whether process pid has ended (reaping it).
func exited(t *testing.T, pid int) bool {
	var ws syscall.WaitStatus
	got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	if err != nil {
		t.Fatalf("wait for member %d: %v", pid, err)
	}
	return got == pid
}

func startsBy(t *testing.T, pool *pgxpool.Pool, pid int) int {
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM handler_starts WHERE pid = $1`, pid).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// deadLetter is one copy on payments.dlq, with what the store holds at its key.
type deadLetter struct {
	key, kind, attempts, reason string
	rec                         consumer.Record
}

// killVerdict is "" when every payment has exactly one row, every payment's
// handler ran and nothing was dead-lettered; otherwise it says precisely what
// went wrong.
func killVerdict(t *testing.T, pool *pgxpool.Pool, brokers []string, storeKind, redisAddr, prefix, schema string) string {
	paid, started := rows(t, pool, "payments"), rows(t, pool, "handler_starts")
	dead := deadLetters(t, brokers)
	var missing, twice, neverStarted []string
	for i := range killOrders {
		id := fmt.Sprintf("pay-%04d", i)
		switch {
		case paid[id] == 0:
			missing = append(missing, id)
		case paid[id] > 1:
			twice = append(twice, id)
		}
		if started[id] == 0 {
			neverStarted = append(neverStarted, id)
		}
	}
	if len(missing)+len(twice)+len(neverStarted)+len(dead) == 0 {
		return ""
	}
	ch, err := newCharger(context.Background(), "", storeKind, redisAddr, prefix, schema)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.close()
	var b strings.Builder
	fmt.Fprintf(&b, "%d orders: %d without a payment row%s, %d with more than one%s, %d whose handler never started%s; %d dead letters",
		killOrders, len(missing), sample(missing), len(twice), sample(twice), len(neverStarted), sample(neverStarted), len(dead))
	if len(dead) == 0 {
		return b.String()
	}
	// One line per dead-lettered order (a payment published twice may have two
	// copies), with what the store holds at its key.
	copies := map[string]int{}
	var orders []*deadLetter
	for i := range dead {
		d := &dead[i]
		if copies[d.key]++; copies[d.key] > 1 {
			continue
		}
		if d.rec, err = ch.store.Peek(context.Background(), consumer.Key(d.key)); err != nil {
			t.Fatalf("peek %s: %v", d.key, err)
		}
		orders = append(orders, d)
	}
	byReason := map[string]int{}
	var unstarted, charged int
	for _, d := range orders {
		byReason[fmt.Sprintf("%s (store: %s, %d attempts)", d.kind, d.rec.State, d.rec.Attempts)]++
		if started[d.key] == 0 {
			unstarted++
		}
		if paid[d.key] > 0 {
			charged++
		}
	}
	reasons := make([]string, 0, len(byReason))
	for r, n := range byReason {
		reasons = append(reasons, fmt.Sprintf("%d %s", n, r))
	}
	sort.Strings(reasons)
	fmt.Fprintf(&b, " for %d orders: %s; %d of those orders dead-lettered without any handler start, %d charged and dead-lettered",
		len(orders), strings.Join(reasons, ", "), unstarted, charged)
	for _, d := range orders[:min(len(orders), 5)] {
		fmt.Fprintf(&b, "\n  %s: %d copies, %s after %s attempts: %q; store: %s, %d attempts, %q; %d handler starts, %d rows",
			d.key, copies[d.key], d.kind, d.attempts, d.reason, d.rec.State, d.rec.Attempts, d.rec.Error, started[d.key], paid[d.key])
	}
	return b.String()
}

// sample is " (" up to five of ids ")", for a failure message ("" for none).
func sample(ids []string) string {
	switch {
	case len(ids) == 0:
		return ""
	case len(ids) > 5:
		return " (" + strings.Join(ids[:5], " ") + " ...)"
	}
	return " (" + strings.Join(ids, " ") + ")"
}

// deadLetters reads every copy on payments.dlq.
func deadLetters(t *testing.T, brokers []string) []deadLetter {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("payments.dlq"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, "payments.dlq")
	if err != nil {
		t.Fatal(err)
	}
	var want int64
	ends.Each(func(o kadm.ListedOffset) { want += o.Offset })
	var out []deadLetter
	for int64(len(out)) < want {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d of %d dead letters: %v", len(out), want, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			d := deadLetter{}
			for _, h := range r.Headers {
				switch h.Key {
				case kafka.HeaderKey:
					d.key = string(h.Value)
				case kafka.HeaderKind:
					d.kind = string(h.Value)
				case kafka.HeaderAttempts:
					d.attempts = string(h.Value)
				case kafka.HeaderError:
					d.reason = string(h.Value)
				}
			}
			out = append(out, d)
		})
	}
	slices.SortFunc(out, func(a, b deadLetter) int { return strings.Compare(a.key, b.key) })
	return out
}
