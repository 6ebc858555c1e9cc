package postgres

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idemkit/consumer"
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

// A schema made by the files before the counted column, with a started record
// claimed by that version and left to expire: Migrate brings it up to date, and
// the record reads as counted, as every claim was then, so that its takeover
// charges an attempt (and on the last attempt exhausts the key).
func TestMigrateKeepsEarlierClaimsCounted(t *testing.T) {
	pool := schemaPool(t)
	ctx := context.Background()
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE idemkit_schema_migrations (version text PRIMARY KEY,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Version >= "006" {
			break
		}
		if _, err := pool.Exec(ctx, m.SQL); err != nil {
			t.Fatalf("%s: %v", m.Version, err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO idemkit_schema_migrations (version) VALUES ($1)`, m.Version); err != nil {
			t.Fatal(err)
		}
	}
	const scope = "upgrade"
	for _, k := range []consumer.Key{"k-1", "k-2"} { // claimed by the earlier version, lease over
		if _, err := pool.Exec(ctx, `INSERT INTO idemkit_records (key_hash, scope, state, owner, fence, attempts,
			lease_ms, created_ms, updated_ms, expires_ms, written_ms)
			SELECT $1, $2, 'started', 'old', 1, 1, now - 1000, now - 2000, now - 2000, now + 3600000, now - 2000
			FROM (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now) clock`, keyHash(scope, k), scope); err != nil {
			t.Fatal(err)
		}
	}
	if err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	st, err := NewStore(pool, consumer.WithScope(scope), consumer.WithMaxAttempts(2))
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := st.Peek(ctx, "k-1"); err != nil || !rec.Counted || rec.Attempts != 1 {
		t.Fatalf("earlier claim after Migrate = %+v (%v), want counted, attempt 1", rec, err)
	}
	if rep := st.Begin(ctx, []consumer.Claim{{Key: "k-1", Owner: "new"}})[0]; rep.Status != consumer.StatusTakenOver || rep.Attempts != 2 || rep.Fence != 2 {
		t.Fatalf("takeover of an earlier claim = %+v, want TAKEN_OVER attempt 2 fence 2", rep)
	}
	last, err := NewStore(pool, consumer.WithScope(scope), consumer.WithMaxAttempts(1))
	if err != nil {
		t.Fatal(err)
	}
	if rep := last.Begin(ctx, []consumer.Claim{{Key: "k-2", Owner: "new"}})[0]; rep.Status != consumer.StatusExhausted {
		t.Fatalf("takeover of an earlier claim on the last attempt = %+v, want EXHAUSTED", rep)
	}
}
