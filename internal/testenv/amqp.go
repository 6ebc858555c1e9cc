package testenv

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// LocalAMQPURL is where a RabbitMQ on this machine listens by default.
const LocalAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"

var sharedAMQP struct {
	once sync.Once
	url  string
	err  error
}

// AMQP returns the URL of a RabbitMQ broker for t: IDEMKIT_AMQP_URL when set, else
// the broker on this machine (127.0.0.1:5672) when it answers, else a container.
// Tests share the broker: each uses its own queue names and deletes them.
func AMQP(t testing.TB) string {
	t.Helper()
	if u := os.Getenv("IDEMKIT_AMQP_URL"); u != "" {
		return u
	}
	sharedAMQP.once.Do(func() {
		if err := amqpAnswers(LocalAMQPURL); err == nil {
			sharedAMQP.url = LocalAMQPURL
			return
		} else {
			sharedAMQP.err = err
		}
		url, stop, err := rabbitContainer()
		if err != nil {
			sharedAMQP.err = fmt.Errorf("%v; %v", sharedAMQP.err, err)
			return
		}
		sharedAMQP.url, sharedAMQP.err = url, nil
		atExit(stop)
	})
	if sharedAMQP.err != nil {
		missing(t, "RabbitMQ broker (start rabbitmq-server or set IDEMKIT_AMQP_URL)", sharedAMQP.err)
	}
	return sharedAMQP.url
}

func amqpAnswers(url string) error {
	conn, err := amqp091.DialConfig(url, amqp091.Config{Dial: amqp091.DefaultDial(2 * time.Second)})
	if err != nil {
		return err
	}
	return conn.Close()
}

func rabbitContainer() (string, func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := engineAnswers(ctx); err != nil {
		return "", nil, err
	}
	c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image:        "rabbitmq:3-management",
			ExposedPorts: []string{"5672/tcp"},
			WaitingFor:   wait.ForListeningPort("5672/tcp").WithStartupTimeout(2 * time.Minute),
		},
		Started: true,
	})
	if err != nil {
		return "", nil, fmt.Errorf("rabbitmq container: %w", err)
	}
	addr, err := c.PortEndpoint(ctx, "5672/tcp", "")
	if err != nil {
		_ = testcontainers.TerminateContainer(c)
		return "", nil, err
	}
	return "amqp://guest:guest@" + addr + "/", func() { _ = testcontainers.TerminateContainer(c) }, nil
}
