package nethttp_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/idemkit/idemkit/adapters/nethttp"
	"github.com/idemkit/idemkit/consumer"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
)

// Environment of a server process (this test binary run again by a test).
const (
	envServer = "IDEMKIT_TEST_HTTP_SERVER"
	envRedis  = "IDEMKIT_TEST_REDIS"
	envPrefix = "IDEMKIT_TEST_PREFIX"
	envListen = "IDEMKIT_TEST_LISTEN"
)

// crashLease is the lease of the process tests' store.
const crashLease = 3 * time.Second

// helperMain runs this test binary as an HTTP server process when a test asked
// for one (see process_test.go); it reports whether it did.
func helperMain() bool {
	if os.Getenv(envServer) == "" {
		return false
	}
	if err := runServer(); err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(1)
	}
	os.Exit(0)
	return true
}

// runServer serves charges whose handler hangs before its side effect, after
// saying so in Redis, until the process is killed.
func runServer() error {
	prefix := os.Getenv(envPrefix)
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(envRedis)})
	defer rdb.Close()
	store, err := redisstore.NewStore(rdb, consumer.WithPrefix(prefix), consumer.WithScope("payments"),
		consumer.WithLease(crashLease))
	if err != nil {
		return err
	}
	mw, err := nethttp.New(store, nethttp.WithScope(userScope))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", os.Getenv(envListen))
	if err != nil {
		return err
	}
	return http.Serve(ln, mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rdb.Set(context.Background(), trapKey(prefix), "1", 0)
		select {} // hangs here until killed
	})))
}

func trapKey(prefix string) string { return "{" + prefix + "}:trapped" }
