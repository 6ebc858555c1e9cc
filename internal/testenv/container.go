package testenv

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// redisContainer starts Redis 7 in a container when a container engine answers.
func redisContainer() (addr string, stop func(), err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := engineAnswers(ctx); err != nil {
		return "", nil, err
	}
	c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image:        "redis:7",
			ExposedPorts: []string{"6379/tcp"},
			WaitingFor:   wait.ForListeningPort("6379/tcp"),
		},
		Started: true,
	})
	if err != nil {
		return "", nil, fmt.Errorf("redis container: %w", err)
	}
	addr, err = c.PortEndpoint(ctx, "6379/tcp", "")
	if err != nil {
		_ = testcontainers.TerminateContainer(c)
		return "", nil, err
	}
	return addr, func() { _ = testcontainers.TerminateContainer(c) }, nil
}

// engineAnswers reports whether a container engine answers a ping within a second.
func engineAnswers(ctx context.Context) (err error) {
	defer func() {
		if recover() != nil {
			err = errors.New("no container engine")
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return fmt.Errorf("no container engine: %w", err)
	}
	defer cli.Close()
	if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
		return fmt.Errorf("no container engine answers: %w", err)
	}
	return nil
}
