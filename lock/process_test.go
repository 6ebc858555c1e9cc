package lock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/fence"
	"github.com/idemkit/idemkit/internal/testenv"
)

type jobEnv struct {
	nodes  []string
	store  string
	prefix string
	dsn    string
	table  fence.Table
}

func newJobEnv(t *testing.T) jobEnv {
	t.Helper()
	srvs, _ := nodes(t, 3)
	e := jobEnv{store: testenv.RedisAddr(t), prefix: testenv.Prefix(t), dsn: testenv.PostgresDSN(),
		table: fence.Table{Name: fmt.Sprintf("idemkit_test_jobs_%d", rand.N(1<<30))}}
	for _, s := range srvs {
		e.nodes = append(e.nodes, s.Addr)
	}
	db := testenv.Postgres(t)
	if err := e.table.Create(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + e.table.Name) })
	return e
}

func (e jobEnv) startHolder(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := testenv.StartSelf(t, envHolder+"=1", envNodes+"="+strings.Join(e.nodes, ","), envStore+"="+e.store,
		envPrefix+"="+e.prefix, envDSN+"="+e.dsn, envTable+"="+e.table.Name)
	rdb := testenv.Redis(t)
	testenv.Eventually(t, 30*time.Second, "the holder to start its job", func() bool {
		return rdb.HGet(context.Background(), "{"+e.prefix+"}:holder", "started").Val() == "1"
	})
	return cmd
}

func (e jobEnv) holderReport(t *testing.T) map[string]string {
	return testenv.Redis(t).HGetAll(context.Background(), "{"+e.prefix+"}:holder").Val()
}

// takeOver runs the job in this process, as the next delivery would.
func (e jobEnv) takeOver(t *testing.T, tries int) (consumer.Result[string], time.Duration) {
	t.Helper()
	_, store, closeAll, err := jobSetup(e.nodes, e.store, e.prefix, tries)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	db := testenv.Postgres(t)
	began := time.Now()
	r := consumer.ExecuteIdempotently(context.Background(), store, jobKey, nil, func(ctx context.Context) (string, error) {
		f, _ := consumer.FenceFromContext(ctx)
		return "taker", e.table.Write(context.Background(), db, string(jobKey), f, []byte("taker"))
	})
	return r, time.Since(began)
}

// A holder stopped (SIGSTOP) past its 1-second lock: another process takes the job
// over with a larger fence and finishes it, long before the 30-second record lease
// would have let it. The holder, resumed, finds its context cancelled, its fenced
// PostgreSQL write refused and its completion answered LEASE_LOST. Exactly one
// write is effective.
func TestPausedHolderIsFencedOut(t *testing.T) {
	e := newJobEnv(t)
	holder := e.startHolder(t)
	if err := holder.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // past the lock's expiry
	r, took := e.takeOver(t, 5)
	if r.Outcome != consumer.Success || r.Fence != 2 {
		t.Fatalf("takeover: %v %v fence %d", r.Outcome, r.Err, r.Fence)
	}
	if err := holder.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := holder.Wait(); err != nil {
		t.Fatalf("holder: %v", err)
	}
	rep := e.holderReport(t)
	if rep["fence"] != "1" || rep["ctx_cancelled"] != "true" || rep["write"] != "stale" ||
		rep["outcome"] != "ERROR" || rep["lease_lost"] != "true" {
		t.Fatalf("the resumed holder reports %v; want fence 1, context cancelled, stale write, ERROR lease lost", rep)
	}
	v, f, writes, _, err := e.table.Read(context.Background(), testenv.Postgres(t), string(jobKey))
	if err != nil || string(v) != "taker" || f != 2 || writes != 1 {
		t.Fatalf("row: %q fence %d writes %d (%v); want the taker's write alone", v, f, writes, err)
	}
	t.Logf("taken over in %v after the pause; the holder's late write was refused", took)
}

// A holder killed (SIGKILL) mid-job: its lock expires and the next process takes
// the job over within the lock expiry plus one retry delay.
func TestKilledHolderIsTakenOverWithinTheLockExpiry(t *testing.T) {
	e := newJobEnv(t)
	holder := e.startHolder(t)
	killed := time.Now()
	if err := holder.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()
	r, _ := e.takeOver(t, 50)
	since := time.Since(killed)
	if r.Outcome != consumer.Success || r.Fence != 2 {
		t.Fatalf("takeover: %v %v fence %d", r.Outcome, r.Err, r.Fence)
	}
	// Lock expiry 1s + retry delay 200ms, with room for the scheduler.
	if since > 1200*time.Millisecond+500*time.Millisecond {
		t.Fatalf("taken over %v after the kill, want within about 1.2s", since)
	}
	v, f, writes, _, _ := e.table.Read(context.Background(), testenv.Postgres(t), string(jobKey))
	if string(v) != "taker" || f != 2 || writes != 1 {
		t.Fatalf("row: %q fence %d writes %d", v, f, writes)
	}
	t.Logf("taken over %v after the kill (lock expiry 1s + retry delay 200ms)", since.Round(time.Millisecond))
}
