package idemprom

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// lagTable is the Kafka commit-lag gauge: the last lag reported for each
// topic/partition, at most max of them, each dropped expiry after its last report.
type lagTable struct {
	desc   *prometheus.Desc
	max    int
	expiry time.Duration
	now    func() time.Time

	mu sync.Mutex
	m  map[partitionKey]lagEntry
}

type partitionKey struct {
	topic     string
	partition int32
}

type lagEntry struct {
	lag int64
	at  time.Time
}

func newLagTable(c *cfg) *lagTable {
	return &lagTable{
		desc: prometheus.NewDesc(prometheus.BuildFQName(c.namespace, "", "kafka_commit_lag"),
			"Records between the last committed offset and the partition's high watermark, at the last commit.",
			[]string{"topic", "partition"}, c.constLabels),
		max: c.lagSeries, expiry: c.lagExpiry, now: c.now, m: make(map[partitionKey]lagEntry),
	}
}

// set records a partition's lag, dropping the least recently reported partition
// when the table is full.
func (t *lagTable) set(topic string, partition int32, lag int64) {
	k, now := partitionKey{topic, partition}, t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.m[k]; !ok && len(t.m) >= t.max {
		var oldest partitionKey
		first := true
		for ok, e := range t.m {
			if first || e.at.Before(t.m[oldest].at) {
				oldest, first = ok, false
			}
		}
		delete(t.m, oldest)
	}
	t.m[k] = lagEntry{lag: lag, at: now}
}

// Describe implements prometheus.Collector.
func (t *lagTable) Describe(ch chan<- *prometheus.Desc) { ch <- t.desc }

// Collect implements prometheus.Collector: it drops expired partitions and sends
// the others.
func (t *lagTable) Collect(ch chan<- prometheus.Metric) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, e := range t.m {
		if now.Sub(e.at) > t.expiry {
			delete(t.m, k)
			continue
		}
		if m, err := prometheus.NewConstMetric(t.desc, prometheus.GaugeValue, float64(e.lag), k.topic,
			strconv.FormatInt(int64(k.partition), 10)); err == nil {
			ch <- m
		}
	}
}
