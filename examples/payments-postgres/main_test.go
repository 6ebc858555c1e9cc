package main

import (
	"context"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/idemkittest"
	"github.com/idemkit/idemkit/store/postgres"
	"github.com/jackc/pgx/v5/pgxpool"
)

// chargesDB is a schema of the test's own, migrated, with the example's
// charges table; the test is skipped without a PostgreSQL (failed under
// IDEMKIT_REQUIRE_SERVICES, as CI sets it).
func chargesDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	admin, err := pool(ctx, "")
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = admin.Ping(pctx)
		cancel()
	}
	if err != nil {
		if v := os.Getenv("IDEMKIT_REQUIRE_SERVICES"); v != "" && v != "0" && v != "false" {
			t.Fatalf("no PostgreSQL at %s: %v", dsn(), err)
		}
		t.Skipf("no PostgreSQL at %s (set IDEMKIT_POSTGRES_DSN): %v", dsn(), err)
	}
	t.Cleanup(admin.Close)
	schema := "payments_kit_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := admin.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) })
	db, err := pool(ctx, schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	if err := postgres.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `CREATE TABLE charges (payment_id text NOT NULL, amount int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return db
}

// The members' handler, through every scenario of the test kit, both ways the
// example runs it. With InTx (the charge row and the key's completion commit
// together) it passes every scenario, with no warning: its completion row
// outlives the store's record. With -plain (the row commits first, the
// completion is recorded afterwards) a crash between the two, or a store down
// until the lease runs out, charges the payment twice: what the example's kill
// -9 shows, found here in a unit test.
func TestPayWithTheKit(t *testing.T) {
	db := chargesDB(t)
	ctx := context.Background()
	p := payment{ID: "pay-00042", Amount: 142}
	kit := idemkittest.New[string](t,
		idemkittest.WithReset(func() {
			if _, err := db.Exec(ctx, `DELETE FROM charges`); err != nil {
				t.Fatal(err)
			}
		}),
		idemkittest.WithEffects(func() int {
			var n int
			if err := db.QueryRow(ctx, `SELECT count(*) FROM charges WHERE payment_id = $1`, p.ID).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}))
	msg := idemkittest.Message{Key: consumer.Key(p.ID), Payload: []byte(`{"id":"pay-00042","amount":142}`)}

	rep := kit.RequireExactlyOnce(ctx, msg, func(ctx context.Context) (string, error) { return pay(ctx, db, p, false) })
	for _, v := range rep.Verdicts {
		if v.Warning != "" {
			t.Errorf("InTx: %s: %s", v.Scenario, v.Warning)
		}
	}

	rep = kit.Check(ctx, msg, func(ctx context.Context) (string, error) { return pay(ctx, db, p, true) })
	want := []idemkittest.Scenario{idemkittest.CrashAfterEffect, idemkittest.StoreDownAtCompletion}
	var failed []idemkittest.Scenario
	for _, v := range rep.Verdicts {
		if v.Failure != "" {
			failed = append(failed, v.Scenario)
		}
	}
	if !slices.Equal(failed, want) || rep.Err != nil {
		t.Fatalf("-plain: failed %v (%v), want %v:\n%s", failed, rep.Err, want, rep)
	}
}
