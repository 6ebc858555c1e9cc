package idemotel

import (
	"context"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// lagTable is the Kafka commit-lag gauge: the last lag reported for each
// topic/partition, at most max of them, each dropped expiry after its last report.
type lagTable struct {
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
	lag   int64
	at    time.Time
	attrs metric.ObserveOption
}

func newLagTable(mt metric.Meter, c *meterCfg) (*lagTable, error) {
	t := &lagTable{max: c.lagSeries, expiry: c.lagExpiry, now: c.now, m: make(map[partitionKey]lagEntry)}
	_, err := mt.Int64ObservableGauge("idemkit.kafka.commit.lag", metric.WithUnit("{record}"),
		metric.WithDescription("Records between the last committed offset and the partition's high watermark, at the last commit."),
		metric.WithInt64Callback(t.observe))
	return t, err
}

// set records a partition's lag, dropping the least recently reported partition
// when the table is full.
func (t *lagTable) set(topic string, partition int32, lag int64) {
	k, now := partitionKey{topic, partition}, t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.m[k]
	if !ok {
		if len(t.m) >= t.max {
			var oldest partitionKey
			first := true
			for ok, e := range t.m {
				if first || e.at.Before(t.m[oldest].at) {
					oldest, first = ok, false
				}
			}
			delete(t.m, oldest)
		}
		e.attrs = metric.WithAttributeSet(attribute.NewSet(attribute.String("topic", topic),
			attribute.String("partition", strconv.FormatInt(int64(partition), 10))))
	}
	e.lag, e.at = lag, now
	t.m[k] = e
}

// observe drops expired partitions and observes the others.
func (t *lagTable) observe(_ context.Context, o metric.Int64Observer) error {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, e := range t.m {
		if now.Sub(e.at) > t.expiry {
			delete(t.m, k)
			continue
		}
		o.Observe(e.lag, e.attrs)
	}
	return nil
}
