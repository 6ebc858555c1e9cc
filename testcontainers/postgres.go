package testcontainers

import (
	"testing"

	tc "github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// DefaultPostgresImage is the image PostgreSQL runs unless WithImage names another.
const DefaultPostgresImage = "postgres:17"

// Postgres starts a PostgreSQL server in a container of its own for t and returns
// a DSN for its database "test" as user "postgres" without a password
// ("postgres://postgres@host:port/test?sslmode=disable") once it accepts clients.
// The container is removed when t ends; t is skipped when no container engine
// answers.
func Postgres(t testing.TB, opts ...Option) string {
	t.Helper()
	cfg := options(t, DefaultPostgresImage, opts)
	c := start(t, "PostgreSQL", cfg, tc.ContainerRequest{
		ExposedPorts: []string{"5432/tcp"},
		Env: map[string]string{
			"POSTGRES_DB":               "test",
			"POSTGRES_HOST_AUTH_METHOD": "trust",
		},
		WaitingFor: wait.ForAll(
			// The image starts the server once to create the database, stops it
			// and starts it for good: only the second "ready" means ready.
			wait.ForLog("database system is ready to accept connections").WithOccurrence(2).WithStartupTimeout(cfg.startup),
			wait.ForListeningPort("5432/tcp").WithStartupTimeout(cfg.startup),
		),
	})
	return "postgres://postgres@" + endpoint(t, c, "PostgreSQL", "5432/tcp") + "/test?sslmode=disable"
}
