package postgres

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/consumer/consumertest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// partitioned is a migrated schema of the test's own whose time-partitioned
// table has partitions of window from now to ahead.
func partitioned(t *testing.T, window, ahead time.Duration) *pgxpool.Pool {
	t.Helper()
	pool := schemaPool(t)
	ctx := context.Background()
	if err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, _, err := MaintainPartitions(ctx, pool, Partitioning{Window: window, Ahead: ahead, Keep: time.Hour}); err != nil {
		t.Fatal(err)
	}
	return pool
}

func TestPartitionedConformance(t *testing.T) {
	consumertest.Run(t, func(t *testing.T, opts ...consumer.Option) (consumer.Store, error) {
		return NewPartitionedStore(partitioned(t, time.Minute, 10*time.Minute), opts...)
	})
}

// Two-second windows, made as time goes by by MaintainPartitions running beside
// the traffic: records move between partitions as they are written in later
// windows, and the store still agrees with the memory store on every step.
func TestMemoryAndPartitionedAgree(t *testing.T) {
	p := Partitioning{Window: 2 * time.Second, Ahead: 10 * time.Second, Keep: time.Hour}
	pool := partitioned(t, p.Window, p.Ahead)
	stop := make(chan struct{})
	maintained := make(chan error, 1)
	go func() {
		defer close(maintained)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
			if _, _, err := MaintainPartitions(context.Background(), pool, p); err != nil {
				maintained <- err
				return
			}
		}
	}()
	defer func() {
		close(stop)
		if err := <-maintained; err != nil {
			t.Fatalf("MaintainPartitions beside the traffic: %v", err)
		}
	}()
	var n atomic.Int32
	consumertest.Agree(t, func(t *testing.T, opts ...consumer.Option) (consumer.Store, error) {
		return NewPartitionedStore(pool, append(opts, consumer.WithScope(fmt.Sprint("agree-", n.Add(1))))...)
	})
	var moved int
	if err := pool.QueryRow(context.Background(), `SELECT count(DISTINCT tableoid) FROM idemkit_records_by_time`).Scan(&moved); err != nil {
		t.Fatal(err)
	}
	if moved < 2 {
		t.Fatalf("the records are in %d partitions: the test did not cross a window", moved)
	}
}

// 64 goroutines deliver 1,000 keys 5 times each: every key's handler runs once,
// though no unique index on the key alone guards the partitioned table (the
// claim's advisory locks do), and though the server's default isolation is
// REPEATABLE READ (whose snapshot, taken before the locks, would not see the
// claim that held them first).
func TestPartitionedRaceExactlyOnce(t *testing.T) {
	pool := partitioned(t, 10*time.Second, 3*time.Minute)
	cfg := pool.Config()
	cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = "repeatable read"
	rr, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	store, err := NewPartitionedStore(rr, consumer.WithScope("race"))
	if err != nil {
		t.Fatal(err)
	}
	raceExactlyOnce(t, store)
}

// MaintainPartitions makes the windows ahead, drops a partition once every record
// in it has expired, and keeps the ones that may hold a live record; a write with
// no partition for it says to run MaintainPartitions.
func TestMaintainPartitions(t *testing.T) {
	pool := schemaPool(t)
	ctx := context.Background()
	if err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	store, err := NewPartitionedStore(pool, consumer.WithScope("m"), consumer.WithLease(time.Second), consumer.WithRetention(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	charge := func(k consumer.Key) consumer.Result[string] {
		return consumer.ExecuteIdempotently(ctx, store, k, nil, func(context.Context) (string, error) { return "done " + string(k), nil })
	}
	if r := charge("early"); r.Err == nil || !strings.Contains(r.Err.Error(), "MaintainPartitions") {
		t.Fatalf("a claim with no partition: %v %v", r.Outcome, r.Err)
	}
	p := Partitioning{Window: time.Second, Ahead: 4 * time.Second, Keep: 2 * time.Second}
	made, dropped, err := MaintainPartitions(ctx, pool, p)
	if err != nil || len(made) < 4 || len(made) > 5 || len(dropped) != 0 {
		t.Fatalf("first run: made %v, dropped %v, %v", made, dropped, err)
	}
	if made2, dropped2, err := MaintainPartitions(ctx, pool, p); err != nil || len(made2) > 1 || len(dropped2) != 0 {
		t.Fatalf("second run at once: made %v, dropped %v, %v", made2, dropped2, err)
	}
	if r := charge("old"); r.Outcome != consumer.Success {
		t.Fatalf("old: %v %v", r.Outcome, r.Err)
	}
	var oldPart string
	if err := pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM idemkit_records_by_time`).Scan(&oldPart); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3500 * time.Millisecond) // the old window has ended more than Keep ago
	if r := charge("new"); r.Outcome != consumer.Success {
		t.Fatalf("new: %v %v", r.Outcome, r.Err)
	}
	made, dropped, err = MaintainPartitions(ctx, pool, p)
	if err != nil || len(made) < 3 || !containsString(dropped, oldPart) {
		t.Fatalf("later run: made %v, dropped %v (want %s among them), %v", made, dropped, oldPart, err)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM idemkit_records_by_time`).Scan(&left); err != nil || left != 1 {
		t.Fatalf("%d records left, want the new one: %v", left, err)
	}
	if r := charge("new"); r.Outcome != consumer.Duplicate || r.Value != "done new" {
		t.Fatalf("new again: %v %q %v", r.Outcome, r.Value, r.Err)
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestMaintainPartitionsBadInput(t *testing.T) {
	ctx := context.Background()
	var nilPool *pgxpool.Pool
	if _, _, err := MaintainPartitions(ctx, nilPool, Partitioning{Keep: time.Hour}); err == nil {
		t.Fatal("nil pool accepted")
	}
	pool := schemaPool(t)
	for _, p := range []Partitioning{{Keep: 0}, {Window: time.Millisecond, Keep: time.Hour}, {Window: time.Hour, Ahead: time.Minute, Keep: time.Hour}} {
		if _, _, err := MaintainPartitions(ctx, pool, p); err == nil || !strings.Contains(err.Error(), "give") {
			t.Fatalf("%+v: %v", p, err)
		}
	}
	if _, _, err := MaintainPartitions(ctx, pool, Partitioning{Keep: time.Hour}); err == nil || !strings.Contains(err.Error(), "Migrate") {
		t.Fatalf("no table: %v", err)
	}
}

// A call that fails (here: no partition for the write) leaves the connection
// usable: given a single connection, the store works once the partitions exist.
func TestPartitionedConnectionOutlivesAFailedCall(t *testing.T) {
	pool := schemaPool(t)
	ctx := context.Background()
	if err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	store, err := NewPartitionedStore(conn, consumer.WithScope("conn"))
	if err != nil {
		t.Fatal(err)
	}
	if r := store.Begin(ctx, []consumer.Claim{{Key: "k", Owner: "o"}}); r[0].Err == nil {
		t.Fatal("a claim with no partition succeeded")
	}
	if _, _, err := MaintainPartitions(ctx, pool, Partitioning{Keep: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if r := store.Begin(ctx, []consumer.Claim{{Key: "k", Owner: "o"}}); r[0].Err != nil || r[0].Status != consumer.StatusAcquired {
		t.Fatalf("the claim after the failed one: %v %v", r[0].Status, r[0].Err)
	}
	if rec, err := store.Peek(ctx, "k"); err != nil || rec.State != "started" {
		t.Fatalf("peek: %s %v", rec.State, err)
	}
}
