package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/idemkit/idemkit/internal/typednil"
	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrationLock is the advisory lock key Migrate holds while it applies files
// (the first eight bytes of "idemkit!" read as a big-endian integer).
const migrationLock int64 = 0x6964656d6b697421

// Beginner is what Migrate needs: *pgxpool.Pool and *pgx.Conn have it.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Migration is one schema file the package ships.
type Migration struct {
	Version string // the file name without ".sql", e.g. "001_completions"
	SQL     string
}

// Migrations returns the schema files in the order Migrate applies them, for
// users who run their own migration tool: apply each once, in this order.
func Migrations() ([]Migration, error) {
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return nil, fmt.Errorf("postgres: list migrations: %w", err)
	}
	sort.Strings(names)
	out := make([]Migration, 0, len(names))
	for _, n := range names {
		b, err := migrationFiles.ReadFile(n)
		if err != nil {
			return nil, fmt.Errorf("postgres: read %s: %w", n, err)
		}
		out = append(out, Migration{Version: strings.TrimSuffix(strings.TrimPrefix(n, "migrations/"), ".sql"), SQL: string(b)})
	}
	return out, nil
}

// Migrate creates or updates the package's tables in db: it applies, in one
// transaction, every shipped file not applied yet. Concurrent calls wait for each
// other; a call on an up-to-date schema changes nothing.
func Migrate(ctx context.Context, db Beginner) error {
	if db == nil || typednil.Is(db) {
		return errors.New("postgres: Migrate: nil database")
	}
	ms, err := Migrations()
	if err != nil {
		return err
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: Migrate: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLock); err != nil {
		return fmt.Errorf("postgres: Migrate: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS idemkit_schema_migrations (
		version    text PRIMARY KEY,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("postgres: Migrate: %w", err)
	}
	for _, m := range ms {
		var done bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM idemkit_schema_migrations WHERE version = $1)`, m.Version).Scan(&done); err != nil {
			return fmt.Errorf("postgres: Migrate: %w", err)
		}
		if done {
			continue
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return fmt.Errorf("postgres: Migrate: apply %s: %w", m.Version, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO idemkit_schema_migrations (version) VALUES ($1)`, m.Version); err != nil {
			return fmt.Errorf("postgres: Migrate: record %s: %w", m.Version, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres: Migrate: commit: %w", err)
	}
	return nil
}
