// Package testenv gives tests the real servers they need.
//
// Each server is found in this order: an address from the environment
// (IDEMKIT_REDIS_ADDR, IDEMKIT_AMQP_URL, IDEMKIT_POSTGRES_DSN, IDEMKIT_KAFKA_BROKERS);
// else a server on this machine or a private one started here (redis-server on a
// free loopback port, a Redis Cluster of three such processes, a Sentinel, the
// RabbitMQ and PostgreSQL on their default local ports, an in-process kfake Kafka
// cluster); else the test is skipped with a message naming the missing server and
// how to provide it. With IDEMKIT_REQUIRE_SERVICES=1 (CI sets it) a missing server
// fails the test instead. Nothing here needs a container engine, so the module's
// tests add no container client to what users download; users who want servers in
// containers for their own tests have the separate testcontainers module.
//
// Tests never flush a shared server: each test works under its own key prefix
// (Prefix) or on its own private process. Packages that use testenv call Run from
// TestMain so that private servers are stopped when the tests end.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// Required reports whether IDEMKIT_REQUIRE_SERVICES asks for missing servers to fail tests.
func Required() bool {
	v := os.Getenv("IDEMKIT_REQUIRE_SERVICES")
	return v != "" && v != "0" && v != "false"
}

// missing skips t, or fails it when servers are required.
func missing(t testing.TB, what string, err error) {
	t.Helper()
	msg := fmt.Sprintf("testenv: no %s available: %v", what, err)
	if Required() {
		t.Fatal(msg + " [IDEMKIT_REQUIRE_SERVICES is set]")
	}
	t.Skip(msg)
}

var (
	cleanMu  sync.Mutex
	cleanups []func()
)

// atExit registers f to run when Run's tests have finished.
func atExit(f func()) {
	cleanMu.Lock()
	defer cleanMu.Unlock()
	cleanups = append(cleanups, f)
}

// Run runs the tests of m, stops every server the package's tests shared, and then
// fails the run if any goroutine is left behind (go.uber.org/goleak).
// Call it from TestMain: func TestMain(m *testing.M) { testenv.Run(m) }.
func Run(m *testing.M) {
	redis.SetLogger(quiet{}) // the fault tests refuse connections on purpose
	code := m.Run()
	cleanMu.Lock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	cleanMu.Unlock()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: goroutines leaked by the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Prefix returns a key prefix unique to t, so tests on a shared server never meet.
func Prefix(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "-", " ", "_", "{", "(", "}", ")").Replace(t.Name())
	return "idemkit-test:" + name + ":" + hex.EncodeToString(b[:])
}

// quiet drops go-redis's own log lines (pool dial failures during fault tests).
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
