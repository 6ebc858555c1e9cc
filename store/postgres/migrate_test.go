package postgres

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/jackc/pgx/v5/pgxpool"
)

// schemaPool is a pool whose connections work in a schema of the test's own,
// dropped at the end.
func schemaPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	db := testenv.Postgres(t) // skips or fails as the environment says when there is no server
	schema := "t_" + strings.ToLower(strings.NewReplacer(":", "_", "-", "_", "/", "_").Replace(testenv.Prefix(t)))
	if len(schema) > 60 {
		schema = schema[len(schema)-60:]
	}
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) })
	cfg, err := pgxpool.ParseConfig(testenv.PostgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Migrate run by eight processes at once applies each file once; a second run
// changes nothing.
func TestMigrateConcurrentAndRepeatable(t *testing.T) {
	pool := schemaPool(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = Migrate(ctx, pool) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM idemkit_schema_migrations`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(ms) || n == 0 {
		t.Fatalf("%d files recorded applied, want %d", n, len(ms))
	}
	if err := Migrate(ctx, nil); err == nil {
		t.Fatal("Migrate on a nil pool")
	}
	var nilPool *pgxpool.Pool
	if err := Migrate(ctx, nilPool); err == nil {
		t.Fatal("Migrate on a nil *pgxpool.Pool")
	}
}

// A query on a table Migrate has not created fails with an error that says to run it.
func TestMissingSchemaNamesMigrate(t *testing.T) {
	pool := schemaPool(t)
	_, err := pool.Exec(context.Background(), `SELECT 1 FROM idemkit_nothing`)
	got := missingSchema(err, "idemkit_nothing")
	if got == nil || !strings.Contains(got.Error(), "postgres.Migrate") || !errors.Is(got, err) {
		t.Fatalf("missing table: %v", got)
	}
	other := errors.New("other")
	if missingSchema(other, "idemkit_nothing") != other {
		t.Fatal("another error was rewritten")
	}
}
