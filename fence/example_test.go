package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"log"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/fence"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A handler writes the report its key owns (one key per month, one row per key)
// with the attempt's fence, in the transaction that writes the rest of the
// report: a worker whose claim was taken over is refused and rolls back, so none
// of its rows land.
func ExampleTable_Write() {
	var db *sql.DB // sql.Open("pgx", "postgres://...")
	reports := fence.Table{Name: "reports"}
	handle := func(ctx context.Context, key consumer.Key) (string, error) {
		f, _ := consumer.FenceFromContext(ctx)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return "", err
		}
		defer func() { _ = tx.Rollback() }()
		// ... the report's other rows, written in tx ...
		err = reports.Write(ctx, tx, string(key), f, []byte("revenue: 42"))
		if errors.Is(err, fence.ErrStale) {
			return "", consumer.Permanent(err) // a newer attempt of this key wrote it
		}
		if err != nil {
			return "", err
		}
		return "written", tx.Commit()
	}
	_ = handle
	log.Print(reports.Schema())
}

// The same over pgx, in a pgx.Tx from a pool.
func ExampleTable_WritePgx() {
	var pool *pgxpool.Pool // pgxpool.New(ctx, "postgres://...")
	reports := fence.Table{Name: "reports"}
	handle := func(ctx context.Context, key consumer.Key) (string, error) {
		f, _ := consumer.FenceFromContext(ctx)
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			// ... the report's other rows, written in tx ...
			return reports.WritePgx(ctx, tx, string(key), f, []byte("revenue: 42"))
		})
		if errors.Is(err, fence.ErrStale) {
			return "", consumer.Permanent(err)
		}
		return "written", err
	}
	_ = handle
}
