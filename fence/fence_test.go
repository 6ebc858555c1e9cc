package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/fence"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { testenv.Run(m) }

// newTable creates a table of its own for t on db, dropped when t ends.
func newTable(t *testing.T, db *sql.DB) fence.Table {
	t.Helper()
	tbl := fence.Table{Name: fmt.Sprintf("idemkit_test_fence_%d", rand.N(1<<30))}
	if err := tbl.Create(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + tbl.Name) })
	return tbl
}

// dsn is the database testenv.Postgres opens, for pgx.
func dsn() string { return testenv.PostgresDSN() }

// steps is one key's history of writes: which are effective and which stale.
var steps = []struct {
	fence int64
	value string
	stale bool
}{
	{1, "first", false},
	{1, "same fence again", true},
	{3, "taken over", false},
	{2, "zombie", true},
	{4, "retry", false},
}

func TestFencedWrites(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	tbl := newTable(t, db)
	for _, s := range steps {
		err := tbl.Write(ctx, db, "order-1", s.fence, []byte(s.value))
		if s.stale != errors.Is(err, fence.ErrStale) || (!s.stale && err != nil) {
			t.Fatalf("write fence %d: %v (stale expected: %v)", s.fence, err, s.stale)
		}
	}
	v, f, writes, found, err := tbl.Read(ctx, db, "order-1")
	if err != nil || !found || string(v) != "retry" || f != 4 || writes != 3 {
		t.Fatalf("read: %q fence %d writes %d found %v err %v", v, f, writes, found, err)
	}
	if _, _, _, found, err := tbl.Read(ctx, db, "never"); found || err != nil {
		t.Fatalf("read of a missing key: %v %v", found, err)
	}
	if err := (fence.Table{Name: "x; DROP TABLE y"}).Create(ctx, db); err == nil {
		t.Fatal("an unsafe table name was accepted")
	}
	var nilDB *sql.DB
	var nilPool *pgxpool.Pool
	if err := tbl.Write(ctx, nilDB, "k", 1, nil); err == nil || errors.Is(err, fence.ErrStale) {
		t.Fatalf("a nil *sql.DB: %v", err)
	}
	if err := tbl.WritePgx(ctx, nilPool, "k", 1, nil); err == nil || errors.Is(err, fence.ErrStale) {
		t.Fatalf("a nil *pgxpool.Pool: %v", err)
	}
}

// The same history of writes through every kind of handle the package takes,
// each on its own key: database/sql's DB, Tx and Conn, pgx's Tx, Pool and Conn.
// Transactions commit at the end; the rows are then read back through the other
// driver.
func TestEveryHandle(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	tbl := newTable(t, db)
	pool, err := pgxpool.New(ctx, dsn())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	conn, err := pgx.Connect(ctx, dsn())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	sconn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sconn.Close()

	type handle struct {
		write func(key string, f int64, v []byte) error
		done  func() error
	}
	nothing := func() error { return nil }
	handles := map[string]func() handle{
		"sql.DB": func() handle {
			return handle{func(k string, f int64, v []byte) error { return tbl.Write(ctx, db, k, f, v) }, nothing}
		},
		"sql.Conn": func() handle {
			return handle{func(k string, f int64, v []byte) error { return tbl.Write(ctx, sconn, k, f, v) }, nothing}
		},
		"sql.Tx": func() handle {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			return handle{func(k string, f int64, v []byte) error { return tbl.Write(ctx, tx, k, f, v) }, tx.Commit}
		},
		"pgxpool.Pool": func() handle {
			return handle{func(k string, f int64, v []byte) error { return tbl.WritePgx(ctx, pool, k, f, v) }, nothing}
		},
		"pgx.Conn": func() handle {
			return handle{func(k string, f int64, v []byte) error { return tbl.WritePgx(ctx, conn, k, f, v) }, nothing}
		},
		"pgx.Tx": func() handle {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return handle{func(k string, f int64, v []byte) error { return tbl.WritePgx(ctx, tx, k, f, v) },
				func() error { return tx.Commit(ctx) }}
		},
	}
	for name, open := range handles {
		h := open()
		for _, s := range steps {
			err := h.write(name, s.fence, []byte(s.value))
			if s.stale != errors.Is(err, fence.ErrStale) || (!s.stale && err != nil) {
				t.Fatalf("%s: write fence %d: %v (stale expected: %v)", name, s.fence, err, s.stale)
			}
		}
		if err := h.done(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		v, f, writes, found, err := tbl.ReadPgx(ctx, pool, name)
		if err != nil || !found || string(v) != "retry" || f != 4 || writes != 3 {
			t.Fatalf("%s, read through pgx: %q fence %d writes %d found %v err %v", name, v, f, writes, found, err)
		}
		if v2, f2, w2, _, err := tbl.Read(ctx, db, name); err != nil || string(v2) != "retry" || f2 != 4 || w2 != 3 {
			t.Fatalf("%s, read through database/sql: %q fence %d writes %d err %v", name, v2, f2, w2, err)
		}
	}
	if err := tbl.CreatePgx(ctx, pool); err != nil { // IF NOT EXISTS: idempotent
		t.Fatal(err)
	}
	if _, _, _, found, err := tbl.ReadPgx(ctx, conn, "never"); found || err != nil {
		t.Fatalf("pgx read of a missing key: %v %v", found, err)
	}
}

// A stale attempt writes its other rows in the same transaction as the fenced
// one and rolls back on ErrStale: none of them lands. A newer attempt's commit
// lands them all.
func TestStaleTransactionLeavesNothing(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	tbl := newTable(t, db)
	lines := tbl.Name + "_lines"
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+lines+" (key text, line text)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + lines) })
	if err := tbl.Write(ctx, db, "report:2026-10", 3, []byte("by attempt 3")); err != nil {
		t.Fatal(err)
	}
	attempt := func(f int64) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+lines+" VALUES ($1, $2)", "report:2026-10", fmt.Sprint("line of attempt ", f)); err != nil {
			return err
		}
		if err := tbl.Write(ctx, tx, "report:2026-10", f, []byte(fmt.Sprint("by attempt ", f))); err != nil {
			return err
		}
		return tx.Commit()
	}
	if err := attempt(2); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("attempt 2 after attempt 3: %v, want ErrStale", err)
	}
	count := func() (n int) {
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+lines).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 0 {
		t.Fatalf("the stale attempt left %d lines", n)
	}
	if err := attempt(4); err != nil {
		t.Fatal(err)
	}
	v, f, writes, _, _ := tbl.Read(ctx, db, "report:2026-10")
	if n := count(); n != 1 || string(v) != "by attempt 4" || f != 4 || writes != 2 {
		t.Fatalf("after attempt 4: %d lines, %q fence %d writes %d", n, v, f, writes)
	}
}

// Two attempts of one key write at once in their own transactions. The second
// waits for the first's row; once the first commits, the second is judged
// against it: an older fence behind a newer one is refused, a newer fence behind
// an older one wins. One order runs over database/sql, the other over pgx.
func TestConcurrentTransactions(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	tbl := newTable(t, db)
	pool, err := pgxpool.New(ctx, dsn())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	waiting := func() bool {
		var n int
		_ = db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO `+tbl.Name+` %'`).Scan(&n)
		return n > 0
	}
	for _, tc := range []struct {
		name          string
		first, second int64
		secondStale   bool
		final         int64
		writes        int
	}{
		{"older-behind-newer", 3, 2, true, 3, 1},
		{"newer-behind-older", 2, 3, false, 3, 2},
	} {
		// The first attempt, over database/sql: written, not yet committed.
		tx1, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := tbl.Write(ctx, tx1, tc.name, tc.first, []byte("first")); err != nil {
			t.Fatal(err)
		}
		// The second, over pgx, blocks on the first's row.
		tx2, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		second := make(chan error, 1)
		go func() { second <- tbl.WritePgx(ctx, tx2, tc.name, tc.second, []byte("second")) }()
		testenv.Eventually(t, 10*time.Second, "the second write to wait for the first's row", waiting)
		if err := tx1.Commit(); err != nil {
			t.Fatal(err)
		}
		err = <-second
		if tc.secondStale != errors.Is(err, fence.ErrStale) || (!tc.secondStale && err != nil) {
			t.Fatalf("%s: second write: %v", tc.name, err)
		}
		if tc.secondStale {
			err = tx2.Rollback(ctx)
		} else {
			err = tx2.Commit(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		_, f, writes, _, err := tbl.Read(ctx, db, tc.name)
		if err != nil || f != tc.final || writes != tc.writes {
			t.Fatalf("%s: fence %d writes %d (%v), want fence %d writes %d", tc.name, f, writes, err, tc.final, tc.writes)
		}
	}
}

// The fence guards what its key owns. Two deposits, each writing the row keyed by
// its own idempotency key: both are effective. The first deposit's attempt is
// taken over after its owner stalled; the stalled owner's late write (fence 1)
// is refused, the takeover's (fence 2) stands. Each handler ran once.
func TestFenceGuardsWhatTheKeyOwns(t *testing.T) {
	db := testenv.Postgres(t)
	ctx := context.Background()
	tbl := newTable(t, db)
	store, err := redisstore.NewStore(testenv.Redis(t), consumer.WithPrefix(testenv.Prefix(t)),
		consumer.WithScope("ledger"), consumer.WithLease(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	runs := map[consumer.Key]int{}
	deposit := func(key consumer.Key, amount string) func(ctx context.Context) (string, error) {
		return func(ctx context.Context) (string, error) {
			runs[key]++
			f, _ := consumer.FenceFromContext(ctx)
			err := tbl.Write(ctx, db, string(key), f, []byte(amount))
			if errors.Is(err, fence.ErrStale) {
				return "", consumer.Permanent(err)
			}
			return "deposited " + amount, err
		}
	}
	// The stalled owner claimed deposit-1 (fence 1) and went quiet.
	stalled := store.Begin(ctx, []consumer.Claim{{Key: "deposit-1", Owner: "stalled"}})[0]
	if !stalled.Claimed() || stalled.Fence != 1 {
		t.Fatalf("claim: %+v", stalled)
	}
	var r1 consumer.Result[string]
	testenv.Eventually(t, 10*time.Second, "deposit-1 taken over after the stalled owner's lease", func() bool {
		r1 = consumer.ExecuteIdempotently(ctx, store, "deposit-1", nil, deposit("deposit-1", "+10"))
		return r1.Outcome != consumer.InProgress
	})
	if r1.Outcome != consumer.Success || r1.Fence != 2 {
		t.Fatalf("deposit-1: %v fence %d %v", r1.Outcome, r1.Fence, r1.Err)
	}
	if err := tbl.Write(ctx, db, "deposit-1", stalled.Fence, []byte("+10 (stalled)")); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("the stalled owner's late write: %v, want ErrStale", err)
	}
	r2 := consumer.ExecuteIdempotently(ctx, store, "deposit-2", nil, deposit("deposit-2", "+20"))
	if r2.Outcome != consumer.Success || r2.Fence != 1 {
		t.Fatalf("deposit-2: %v fence %d %v", r2.Outcome, r2.Fence, r2.Err)
	}
	for key, want := range map[string]struct {
		value string
		fence int64
	}{"deposit-1": {"+10", 2}, "deposit-2": {"+20", 1}} {
		v, f, writes, _, err := tbl.Read(ctx, db, key)
		if err != nil || string(v) != want.value || f != want.fence || writes != 1 {
			t.Fatalf("%s: %q fence %d writes %d (%v)", key, v, f, writes, err)
		}
	}
	if runs["deposit-1"] != 1 || runs["deposit-2"] != 1 {
		t.Fatalf("handler runs %v, want one each", runs)
	}
}
