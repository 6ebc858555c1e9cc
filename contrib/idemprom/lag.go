package idemprom

import (
	"strconv"

	"github.com/idemkit/idemkit/internal/telemetry"
	"github.com/prometheus/client_golang/prometheus"
)

// lagTable is the Kafka commit-lag gauge: the last lag reported for each
// topic/partition, at most WithLagSeries of them, each dropped WithLagExpiry
// after its last report.
type lagTable struct {
	desc *prometheus.Desc
	*telemetry.LagTable[struct{}]
}

func newLagTable(c *cfg) *lagTable {
	return &lagTable{
		desc: prometheus.NewDesc(prometheus.BuildFQName(c.namespace, "", "kafka_commit_lag"),
			"Records between the last committed offset and the partition's high watermark, at the last commit.",
			[]string{"topic", "partition"}, c.constLabels),
		LagTable: telemetry.NewLagTable(c.lagSeries, c.lagExpiry, c.now, func(telemetry.Partition) struct{} { return struct{}{} }),
	}
}

// set records a partition's lag.
func (t *lagTable) set(topic string, partition int32, lag int64) { t.Set(topic, partition, lag) }

// Describe implements prometheus.Collector.
func (t *lagTable) Describe(ch chan<- *prometheus.Desc) { ch <- t.desc }

// Collect implements prometheus.Collector: it drops expired partitions and sends
// the others.
func (t *lagTable) Collect(ch chan<- prometheus.Metric) {
	t.Each(func(p telemetry.Partition, lag int64, _ struct{}) {
		if m, err := prometheus.NewConstMetric(t.desc, prometheus.GaugeValue, float64(lag), p.Topic,
			strconv.FormatInt(int64(p.Partition), 10)); err == nil {
			ch <- m
		}
	})
}
