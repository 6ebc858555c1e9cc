package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"log"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/fence"
)

// Inside a handler: write the result with the attempt's fence, so a worker whose
// claim was taken over cannot overwrite its successor's result.
func ExampleTable_Write() {
	var db *sql.DB // sql.Open("pgx", "postgres://...")
	reports := fence.Table{Name: "reports"}
	handler := func(ctx context.Context) (string, error) {
		f, _ := consumer.FenceFromContext(ctx)
		err := reports.Write(ctx, db, "2026-10", f, []byte("revenue: 42"))
		if errors.Is(err, fence.ErrStale) {
			return "", consumer.Permanent(err) // a newer attempt already wrote it
		}
		return "written", err
	}
	_ = handler
	log.Print(reports.Schema())
}
