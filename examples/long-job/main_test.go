package main

import (
	"context"
	"database/sql"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/idemkittest"
)

// database is the PostgreSQL the example uses; the test is skipped without one
// (failed under IDEMKIT_REQUIRE_SERVICES, as CI sets it).
func database(t *testing.T) *sql.DB {
	t.Helper()
	dsn := os.Getenv("IDEMKIT_POSTGRES_DSN")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	db, err := sql.Open("pgx", dsn)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = db.PingContext(ctx)
		cancel()
	}
	if err != nil {
		if v := os.Getenv("IDEMKIT_REQUIRE_SERVICES"); v != "" && v != "0" && v != "false" {
			t.Fatalf("no PostgreSQL at %s: %v", dsn, err)
		}
		t.Skipf("no PostgreSQL at %s (set IDEMKIT_POSTGRES_DSN): %v", dsn, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// The report job, through every scenario of the test kit. Its effect is the
// row its key owns, written through the fence: running it again rewrites the
// same report with a newer fence, and a worker that lost its lease is refused,
// so it passes every scenario. After the retention the record is new, its
// fence restarts at 1 and the row refuses the write as stale: the kit logs
// that as a warning (keep the retention longer than a job can come again).
func TestReportWithTheKit(t *testing.T) {
	db := database(t)
	ctx := context.Background()
	if err := reports.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	stepTime = time.Millisecond
	t.Cleanup(func() { stepTime = 500 * time.Millisecond })
	month := "2026-07-kit-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	key := consumer.Key("report:" + month)
	reset := func() {
		if _, err := db.ExecContext(ctx, `DELETE FROM `+reports.Name+` WHERE key = $1`, string(key)); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(reset)
	kit := idemkittest.New[string](t, idemkittest.WithReset(reset), idemkittest.WithEffects(func() int {
		_, _, _, found, err := reports.Read(ctx, db, string(key))
		if err != nil {
			t.Fatal(err)
		}
		if found {
			return 1
		}
		return 0
	}))
	job := generate(db)
	rep := kit.RequireExactlyOnce(ctx, idemkittest.Message{Key: key, Payload: []byte(month)},
		func(ctx context.Context) (string, error) { return job(ctx, key, month) })
	if v, _ := rep.Verdict(idemkittest.AfterRetention); v.Warning == "" {
		t.Error("after the retention: no warning about the fence that restarted")
	}
}
