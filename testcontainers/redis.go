package testcontainers

import (
	"testing"

	tc "github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// DefaultRedisImage is the image Redis runs unless WithImage names another.
const DefaultRedisImage = "redis:7"

// Redis starts a Redis server in a container of its own for t and returns its
// "host:port" once it answers clients. The container is removed when t ends. The
// server keeps nothing on disk (no snapshots, no append-only file), so a test may
// stop and inspect it freely; t is skipped when no container engine answers.
func Redis(t testing.TB, opts ...Option) string {
	t.Helper()
	cfg := options(t, DefaultRedisImage, opts)
	c := start(t, "Redis", cfg, tc.ContainerRequest{
		ExposedPorts: []string{"6379/tcp"},
		Cmd:          []string{"redis-server", "--save", "", "--appendonly", "no"},
		WaitingFor: wait.ForAll(
			wait.ForLog("Ready to accept connections").WithStartupTimeout(cfg.startup),
			wait.ForListeningPort("6379/tcp").WithStartupTimeout(cfg.startup),
		),
	})
	return endpoint(t, c, "Redis", "6379/tcp")
}
