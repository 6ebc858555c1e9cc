// Package testcontainers starts the servers idemkit works with in containers, for
// your own integration tests: Redis, RabbitMQ, Kafka and PostgreSQL, each ready to
// use when the call returns and removed when the test ends.
//
//	func TestCharge(t *testing.T) {
//		rdb := redis.NewClient(&redis.Options{Addr: testcontainers.Redis(t)})
//		store, err := redisstore.NewStore(rdb, consumer.WithScope("payments-test"))
//		...
//	}
//
// Each function takes the test, starts one container of its own (tests never share
// one, so a test may do anything to its server), waits until the server accepts
// clients, registers the container's removal with t.Cleanup and returns where to
// connect:
//
//   - Redis: "host:port".
//   - RabbitMQ: an AMQP URL with the guest account, "amqp://guest:guest@host:port/".
//   - Kafka: the seed brokers of a single-node KRaft cluster that creates topics on
//     first use.
//   - Postgres: a DSN for the database "test" as user "postgres" (no password).
//
// When no container engine answers (no Docker or Podman, or DOCKER_HOST points
// nowhere) the test is skipped with a message that says so; with
// IDEMKIT_REQUIRE_CONTAINERS=1 in the environment it fails instead, so that a CI
// job that is meant to have an engine cannot pass by skipping. A container that does
// not start or never becomes ready fails the test with the engine's error.
//
// This is a module of its own, github.com/idemkit/idemkit/testcontainers, so that
// the container engine client (testcontainers-go, the Docker API client and their
// OpenTelemetry instrumentation, about sixty modules) reaches only the tests of
// those who ask for it, never the build of a program that uses idemkit. It is built
// on testcontainers-go because that library already solves what matters here:
// finding the engine (Docker, Podman, DOCKER_HOST, the Testcontainers settings
// file), pulling images, mapping ports, waiting for readiness and removing
// containers left behind by a test binary that was killed (its reaper).
//
// The module requires testcontainers-go v0.44.0 rather than v0.45.0: v0.45.0 and
// the Docker client it needs ask for a go-ansiterm pseudo-version that the module
// proxy refuses, which would make `go mod tidy` fail in your module unless you
// copied a replace line. With v0.44.0 every version in the graph is served, and no
// replace line is needed.
package testcontainers
