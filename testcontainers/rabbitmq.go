package testcontainers

import (
	"testing"

	tc "github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// DefaultRabbitMQImage is the image RabbitMQ runs unless WithImage names another.
const DefaultRabbitMQImage = "rabbitmq:4"

// RabbitMQ starts a RabbitMQ broker in a container of its own for t and returns its
// AMQP URL with the guest account ("amqp://guest:guest@host:port/") once the broker
// has finished booting. The container is removed when t ends; t is skipped when no
// container engine answers.
func RabbitMQ(t testing.TB, opts ...Option) string {
	t.Helper()
	cfg := options(t, DefaultRabbitMQImage, opts)
	c := start(t, "RabbitMQ", cfg, tc.ContainerRequest{
		ExposedPorts: []string{"5672/tcp"},
		WaitingFor: wait.ForAll(
			wait.ForLog("Server startup complete").WithStartupTimeout(cfg.startup),
			wait.ForListeningPort("5672/tcp").WithStartupTimeout(cfg.startup),
		),
	})
	return "amqp://guest:guest@" + endpoint(t, c, "RabbitMQ", "5672/tcp") + "/"
}
