package testcontainers

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	tc "github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
)

// engineCheckTimeout bounds asking the container engine whether it is there.
const engineCheckTimeout = 10 * time.Second

// The engine is asked once per test binary: the answer does not change while the
// tests run, and asking costs a connection attempt per test otherwise.
var engine struct {
	once sync.Once
	err  error
}

// engineAnswers reports why no container engine can be used, or nil.
func engineAnswers() error {
	engine.once.Do(func() { engine.err = askEngine() })
	return engine.err
}

func askEngine() (err error) {
	// testcontainers-go panics on some engine set-ups it cannot make sense of
	// (a malformed DOCKER_HOST, a settings file naming a missing socket); that is
	// one more way of saying there is no usable engine.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the container engine client gave up: %v", r)
		}
	}()
	p, err := tc.ProviderDefault.GetProvider(tc.WithLogger(tclog.NewNoopLogger()))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), engineCheckTimeout)
	defer cancel()
	return p.Health(ctx)
}

// requireEnv names the variable that turns a missing engine from a skip into a
// failure. It is not IDEMKIT_REQUIRE_SERVICES, which idemkit's own CI sets for the
// servers it runs as local processes, on machines that have no container engine.
const requireEnv = "IDEMKIT_REQUIRE_CONTAINERS"

// required reports whether IDEMKIT_REQUIRE_CONTAINERS asks for a missing engine to
// fail tests instead of skipping them.
func required() bool {
	v := os.Getenv(requireEnv)
	return v != "" && v != "0" && v != "false"
}

// start runs req for t and returns the running, ready container, removed when t
// ends. It skips t when no engine answers and fails it when the container does not
// start or never becomes ready.
func start(t testing.TB, server string, cfg config, req tc.ContainerRequest) tc.Container {
	t.Helper()
	if err := engineAnswers(); err != nil {
		msg := fmt.Sprintf("testcontainers: %s needs a container engine and none answers (%v); "+
			"start Docker or Podman, or set DOCKER_HOST to one", server, err)
		if required() {
			t.Fatal(msg + " [" + requireEnv + " is set]")
		}
		t.Skip(msg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.startup)
	defer cancel()
	req.Image = cfg.image
	c, err := tc.GenericContainer(ctx, tc.GenericContainerRequest{
		ContainerRequest: req,
		Started:          true,
		Logger:           tclog.TestLogger(t),
	})
	if c != nil { // also a container that started and then failed its readiness check
		t.Cleanup(func() {
			if err := tc.TerminateContainer(c); err != nil {
				t.Errorf("testcontainers: remove the %s container: %v", server, err)
			}
		})
	}
	if err != nil {
		t.Fatalf("testcontainers: start %s from image %s within %v: %v", server, cfg.image, cfg.startup, err)
	}
	return c
}

// endpoint returns "host:port" where port, a container port such as "6379/tcp",
// is reachable from the test.
func endpoint(t testing.TB, c tc.Container, server, port string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), engineCheckTimeout)
	defer cancel()
	addr, err := c.PortEndpoint(ctx, port, "")
	if err != nil {
		t.Fatalf("testcontainers: where %s's port %s is published: %v", server, port, err)
	}
	return addr
}

// options validates opts for t, failing it with what to change.
func options(t testing.TB, defaultImage string, opts []Option) config {
	t.Helper()
	cfg, err := newConfig(defaultImage, opts)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
