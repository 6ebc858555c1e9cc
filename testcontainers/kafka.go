package testcontainers

import (
	"context"
	"fmt"
	"testing"

	tc "github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// DefaultKafkaImage is the image Kafka runs unless WithImage names another (an
// apache/kafka image: Kafka is configured through that image's KAFKA_*
// environment variables).
const DefaultKafkaImage = "apache/kafka:3.9.0"

// kafkaStartScript is where the container waits for its start script: Kafka must
// advertise the address clients reach it at, and the engine only chooses the
// published port once the container has started.
const kafkaStartScript = "/tmp/idemkit-kafka-start.sh"

// Kafka starts a single-node Kafka cluster (KRaft, broker and controller in one
// process) in a container of its own for t and returns its seed brokers once the
// broker accepts clients. Topics are created on first use with one partition;
// create them yourself (kadm) for more. The container is removed when t ends; t is
// skipped when no container engine answers.
func Kafka(t testing.TB, opts ...Option) []string {
	t.Helper()
	cfg := options(t, DefaultKafkaImage, opts)
	c := start(t, "Kafka", cfg, tc.ContainerRequest{
		ExposedPorts: []string{"9092/tcp"},
		Env: map[string]string{
			"KAFKA_NODE_ID":                                  "1",
			"KAFKA_PROCESS_ROLES":                            "broker,controller",
			"KAFKA_CONTROLLER_QUORUM_VOTERS":                 "1@localhost:9093",
			"KAFKA_CONTROLLER_LISTENER_NAMES":                "CONTROLLER",
			"KAFKA_INTER_BROKER_LISTENER_NAME":               "BROKER",
			"KAFKA_LISTENERS":                                "PLAINTEXT://:9092,CONTROLLER://:9093,BROKER://:9094",
			"KAFKA_LISTENER_SECURITY_PROTOCOL_MAP":           "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,BROKER:PLAINTEXT",
			"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR":         "1",
			"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
			"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR":            "1",
			"KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS":         "0",
		},
		Entrypoint: []string{"sh", "-c",
			"while [ ! -f " + kafkaStartScript + " ]; do sleep 0.1; done; exec bash " + kafkaStartScript},
		LifecycleHooks: []tc.ContainerLifecycleHooks{{
			PostStarts: []tc.ContainerHook{advertiseKafka},
		}},
		WaitingFor: wait.ForAll(
			wait.ForLog("Kafka Server started").WithStartupTimeout(cfg.startup),
			wait.ForListeningPort("9092/tcp").WithStartupTimeout(cfg.startup),
		),
	})
	return []string{endpoint(t, c, "Kafka", "9092/tcp")}
}

// advertiseKafka gives the waiting container its start script, which advertises
// the published address to clients (and the container's own name to itself) and
// then runs the image's usual start command.
func advertiseKafka(ctx context.Context, c tc.Container) error {
	if err := wait.ForMappedPort("9092/tcp").WaitUntilReady(ctx, c); err != nil {
		return fmt.Errorf("kafka port not published: %w", err)
	}
	addr, err := c.PortEndpoint(ctx, "9092/tcp", "")
	if err != nil {
		return fmt.Errorf("kafka published address: %w", err)
	}
	script := "#!/bin/bash\n" +
		"export KAFKA_ADVERTISED_LISTENERS=\"PLAINTEXT://" + addr + ",BROKER://${HOSTNAME:-$(hostname)}:9094\"\n" +
		"exec /etc/kafka/docker/run\n"
	if err := c.CopyToContainer(ctx, []byte(script), kafkaStartScript, 0o755); err != nil {
		return fmt.Errorf("kafka start script: %w", err)
	}
	return nil
}
