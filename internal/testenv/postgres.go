package testenv

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// LocalPostgresDSN is the PostgreSQL on this machine (trust authentication).
const LocalPostgresDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// PostgresDSN is the database tests use: IDEMKIT_POSTGRES_DSN when set, else the
// PostgreSQL on this machine.
func PostgresDSN() string {
	if dsn := os.Getenv("IDEMKIT_POSTGRES_DSN"); dsn != "" {
		return dsn
	}
	return LocalPostgresDSN
}

// Postgres opens a database for t: IDEMKIT_POSTGRES_DSN when set, else the
// PostgreSQL on this machine. Tests create tables of their own names and drop them.
func Postgres(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", PostgresDSN())
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = db.PingContext(ctx)
		cancel()
	}
	if err != nil {
		missing(t, "PostgreSQL (start it or set IDEMKIT_POSTGRES_DSN)", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}
