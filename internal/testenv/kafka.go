package testenv

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Kafka gives t a Kafka cluster with topics created (partitions each): the brokers
// of IDEMKIT_KAFKA_BROKERS when set, else an in-process kfake cluster closed when t
// ends. Cluster is nil for an external cluster (fault injection needs kfake).
func Kafka(t testing.TB, partitions int32, topics ...string) (brokers []string, cluster *kfake.Cluster) {
	t.Helper()
	if env := os.Getenv("IDEMKIT_KAFKA_BROKERS"); env != "" {
		brokers = strings.Split(env, ",")
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
		if err != nil {
			t.Fatalf("testenv: kafka client: %v", err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := kadm.NewClient(cl).CreateTopics(ctx, partitions, 1, nil, topics...); err != nil {
			t.Fatalf("testenv: create topics: %v", err)
		}
		return brokers, nil
	}
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.SeedTopics(partitions, topics...),
		kfake.GroupMinSessionTimeout(500*time.Millisecond),
	)
	if err != nil {
		missing(t, "Kafka (kfake)", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs(), c
}
