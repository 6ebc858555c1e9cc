package idemprom

import (
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The commit-lag gauge keeps at most WithLagSeries partitions, dropping the one
// committed least recently, and forgets a partition not committed for
// WithLagExpiry.
func TestLagBoundedAndExpired(t *testing.T) {
	now := time.Unix(1000, 0)
	m, err := New(WithLagSeries(2), WithLagExpiry(time.Minute), optFunc(func(c *cfg) { c.now = func() time.Time { return now } }))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	commit := func(p int32, lag int64) {
		now = now.Add(time.Second)
		m.OnCommit(consumer.CommitEvent{Source: "kafka", Origin: consumer.Origin{Topic: "t", Partition: p}, Lag: lag})
	}
	expect := func(series string) {
		t.Helper()
		want := "# HELP idemkit_kafka_commit_lag Records between the last committed offset and the partition's high watermark, at the last commit.\n" +
			"# TYPE idemkit_kafka_commit_lag gauge\n" + series
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "idemkit_kafka_commit_lag"); err != nil {
			t.Fatal(err)
		}
	}
	commit(0, 10)
	commit(1, 11)
	commit(0, 5) // partition 0 is now the most recent
	commit(2, 12)
	expect("idemkit_kafka_commit_lag{partition=\"0\",topic=\"t\"} 5\nidemkit_kafka_commit_lag{partition=\"2\",topic=\"t\"} 12\n")
	now = now.Add(59 * time.Second) // partition 0 was committed 60 s ago, partition 2 59 s ago
	commit(2, 1)
	now = now.Add(time.Second)
	expect("idemkit_kafka_commit_lag{partition=\"2\",topic=\"t\"} 1\n")
}
