package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/postgres"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pgSchema makes a schema of t's own in the test database, migrated unless
// bare, and returns a DSN whose search_path is it; the schema is dropped when t
// ends.
func pgSchema(t *testing.T, bare bool) string {
	t.Helper()
	db := testenv.Postgres(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	schema := "idemkit_cli_" + hex.EncodeToString(b[:])
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) })
	dsn := testenv.PostgresDSN()
	switch {
	case !strings.Contains(dsn, "://"):
		dsn += " search_path=" + schema
	case strings.Contains(dsn, "?"):
		dsn += "&search_path=" + schema
	default:
		dsn += "?search_path=" + schema
	}
	if !bare {
		if err := postgres.Migrate(ctx, pgPool(t, dsn)); err != nil {
			t.Fatal(err)
		}
	}
	return dsn
}

// pgPool is a pool on dsn, closed when t ends.
func pgPool(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// pgStores makes PostgreSQL stores on scope payments in dsn's schema.
func pgStores(t *testing.T, dsn string) newStoreFunc {
	pool := pgPool(t, dsn)
	return func(lease time.Duration) recordStore {
		s, err := postgres.NewStore(pool, consumer.WithScope("payments"), consumer.WithLease(lease))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

// stuckKeyUnstuck is the dead worker's key on the store storeFlags name: a
// claim on order-42 with an hour's lease whose owner never comes back. list
// finds it started, inspect shows its owner, unstick ends the claim with a
// reason that inspect shows, and the next delivery runs it once.
func stuckKeyUnstuck(t *testing.T, env, storeFlags []string, mk newStoreFunc) {
	t.Helper()
	ctx := context.Background()
	store := mk(time.Hour)
	rep := store.Begin(ctx, []consumer.Claim{{Key: "order-42", Owner: "replica-7-0", Fingerprint: consumer.FingerprintOf([]byte("charge 42")), Start: true}})[0]
	if !rep.Claimed() {
		t.Fatalf("claim order-42: %+v", rep)
	}
	flags := append(append([]string{}, storeFlags...), "--scope", "payments")
	cli := func(args ...string) result {
		t.Helper()
		return idemkitEnv(t, env, append(args, flags...)...)
	}

	r := cli("list", "--state", "started", "--json")
	var listed struct {
		Scope   string
		Records []struct{ Key, State, Owner, Scope string }
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &listed) != nil || len(listed.Records) != 1 ||
		listed.Records[0].Key != "order-42" || listed.Records[0].Owner != "replica-7-0" || listed.Records[0].Scope != "payments" {
		t.Fatalf("list --state started: %+v", r)
	}
	expect(t, cli("list"), exitOK, "order-42", "started", "replica-7-0", `1 records in scope "payments"`)
	expect(t, cli("inspect", "order-42"), exitOK, "state        started", "owner        replica-7-0", "fence        1", "attempts     1")
	expect(t, cli("inspect", "order-7"), exitNotFound, `no record at the key "order-7" in scope "payments"`)
	expect(t, cli("rerun", "order-42", "--reason", "x"), exitRefused, "the record is started")
	expect(t, cli("unstick", "order-42", "--actor", "alice", "--reason", "worker died in the outage"), exitOK,
		"unstick payments/order-42: started -> retry, fence 1 -> 2", "recorded: unstick by alice: worker died in the outage", "its owner's lease had")
	expect(t, cli("inspect", "order-42"), exitOK, "retry", "unstick by alice: worker died in the outage")
	expect(t, cli("stats"), exitOK, "retry      1", "total      1")

	runs := 0
	for range 3 { // the next delivery, and two duplicates
		res := consumer.ExecuteIdempotently(ctx, store, "order-42", []byte("charge 42"), func(context.Context) (string, error) {
			runs++
			return "charged", nil
		})
		if res.Outcome != consumer.Success && res.Outcome != consumer.Duplicate {
			t.Fatalf("delivery: %+v", res)
		}
	}
	if runs != 1 {
		t.Fatalf("handler ran %d times after the unstick, want 1", runs)
	}
	r = cli("inspect", "order-42", "--json")
	var rec struct {
		State string
		Fence int64
		Notes []struct{ Text string }
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rec) != nil || rec.State != "completed" || rec.Fence != 3 ||
		len(rec.Notes) != 1 || rec.Notes[0].Text != "unstick by alice: worker died in the outage" {
		t.Fatalf("inspect after the delivery: %+v", r)
	}
}

// The dead worker's key on PostgreSQL, through the command.
func TestStuckKeyUnstuckPostgres(t *testing.T) {
	dsn := pgSchema(t, false)
	stuckKeyUnstuck(t, nil, []string{"--postgres", dsn}, pgStores(t, dsn))
}

// The dead worker's key on PostgreSQL named by IDEMKIT_POSTGRES_DSN alone.
func TestStuckKeyUnstuckPostgresEnv(t *testing.T) {
	dsn := pgSchema(t, false)
	stuckKeyUnstuck(t, []string{"IDEMKIT_POSTGRES_DSN=" + dsn}, nil, pgStores(t, dsn))
}

// The dead replica's 36 stuck keys on PostgreSQL, unstuck with --all: the same
// exact counts as on Redis.
func TestBulkUnstickDeadReplicaPostgres(t *testing.T) {
	dsn := pgSchema(t, false)
	bulkUnstickDeadReplica(t, nil, []string{"--postgres", dsn}, pgStores(t, dsn))
}

// Picking the store: two are a usage error that names them, a flag of another
// store is refused, bench is Redis's only, and an unmigrated database says so.
func TestStoreChoice(t *testing.T) {
	bare := pgSchema(t, true)
	pg := []string{"--postgres", bare}
	for _, tc := range []struct {
		env  []string
		args []string
		code int
		want []string
	}{
		{nil, []string{"--redis", "127.0.0.1:6379", "--postgres", bare, "list"}, exitUsage,
			[]string{"--redis (Redis) and --postgres (PostgreSQL): give one store"}},
		{nil, []string{"--postgres", bare, "--dynamodb", "idemkit", "inspect", "k"}, exitUsage,
			[]string{"--postgres (PostgreSQL) and --dynamodb (DynamoDB): give one store"}},
		{[]string{"IDEMKIT_POSTGRES_DSN=" + bare, "IDEMKIT_DYNAMODB_TABLE=idemkit"}, []string{"stats"}, exitUsage,
			[]string{"the environment names two stores, IDEMKIT_POSTGRES_DSN (PostgreSQL) and IDEMKIT_DYNAMODB_TABLE (DynamoDB)"}},
		{nil, append([]string{"--cluster", "list"}, pg...), exitUsage, []string{"--cluster is a Redis flag, and the records are in PostgreSQL"}},
		{nil, []string{"--postgres-partitioned", "list"}, exitUsage, []string{"--postgres-partitioned is a PostgreSQL flag, and the records are in Redis"}},
		{nil, []string{"--postgres", "", "list"}, exitUsage, []string{"--postgres is empty"}},
		{nil, append([]string{"bench"}, pg...), exitUsage, []string{"bench works on Redis only, and the records are in PostgreSQL at"}},
		{nil, append([]string{"--timeout", "2s", "stats"}, pg...), exitUnreachable, []string{"has no idemkit tables", "postgres.Migrate"}},
		{nil, []string{"--postgres", "postgres://postgres@127.0.0.1:1/test?sslmode=disable", "--timeout", "300ms", "inspect", "k"}, exitUnreachable,
			[]string{"the PostgreSQL at 127.0.0.1:1/test did not answer (check --postgres"}},
	} {
		r := idemkitEnv(t, tc.env, tc.args...)
		expect(t, r, tc.code, tc.want...)
	}
	// A store flag wins over the environment's other store.
	expect(t, idemkitEnv(t, []string{"IDEMKIT_DYNAMODB_TABLE=idemkit"}, append([]string{"--timeout", "2s", "stats"}, pg...)...), exitUnreachable,
		"has no idemkit tables")
}
