package postgres

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestCompletionsAreHeapOnlyUpdates: the record table leaves room on its pages
// (fillfactor), so that the completion of a claim is a heap-only (HOT) update that
// writes none of the table's indexes again. 500 keys through ExecuteBatch: 500
// handler runs, 500 rows inserted, 500 updated, every update heap-only.
func TestCompletionsAreHeapOnlyUpdates(t *testing.T) {
	pool := migrated(t)
	ctx := context.Background()
	var ff string
	if err := pool.QueryRow(ctx, `SELECT coalesce(array_to_string(reloptions, ','), '') FROM pg_class WHERE oid = 'idemkit_records'::regclass`).Scan(&ff); err != nil {
		t.Fatal(err)
	}
	if ff != "fillfactor=50" {
		t.Fatalf("idemkit_records reloptions %q; want fillfactor=50", ff)
	}
	// The store gets a pool of its own: closing it ends its server processes, which
	// hands their statistics to the cumulative statistics at once.
	own, err := pgxpool.NewWithConfig(ctx, pool.Config())
	if err != nil {
		t.Fatal(err)
	}
	store, err := NewStore(own, consumer.WithScope("hot"))
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	var runs atomic.Int64
	for lo := 0; lo < n; lo += 100 {
		items := make([]consumer.BatchItem, 100)
		for i := range items {
			items[i] = consumer.BatchItem{Key: consumer.Key(fmt.Sprintf("hot-%04d", lo+i))}
		}
		for _, r := range consumer.ExecuteBatch(ctx, store, items, func(context.Context, int, consumer.BatchItem) (string, error) {
			runs.Add(1)
			return "ok", nil
		}) {
			if r.Outcome != consumer.Success {
				t.Fatalf("%s: %v %v", r.Key, r.Outcome, r.Err)
			}
		}
	}
	own.Close()
	if got := runs.Load(); got != n {
		t.Fatalf("handler runs %d; want %d", got, n)
	}
	var ins, upd, hot int64
	testenv.Eventually(t, 30*time.Second, "the store's statistics to arrive", func() bool {
		err := pool.QueryRow(ctx, `SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
			WHERE relid = 'idemkit_records'::regclass`).Scan(&ins, &upd, &hot)
		if err != nil {
			t.Fatal(err)
		}
		return ins == n && upd == n
	})
	if hot != upd {
		t.Fatalf("%d of %d completions were heap-only updates; want all", hot, upd)
	}
}
