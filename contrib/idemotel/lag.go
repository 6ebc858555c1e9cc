package idemotel

import (
	"context"
	"strconv"

	"github.com/idemkit/idemkit/internal/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// lagTable is the Kafka commit-lag gauge: the last lag reported for each
// topic/partition, at most WithLagSeries of them, each dropped WithLagExpiry
// after its last report; each partition's attributes are built once.
type lagTable struct {
	*telemetry.LagTable[metric.ObserveOption]
}

func newLagTable(mt metric.Meter, c *meterCfg) (*lagTable, error) {
	t := &lagTable{telemetry.NewLagTable(c.lagSeries, c.lagExpiry, c.now, func(p telemetry.Partition) metric.ObserveOption {
		return metric.WithAttributeSet(attribute.NewSet(attribute.String("topic", p.Topic),
			attribute.String("partition", strconv.FormatInt(int64(p.Partition), 10))))
	})}
	_, err := mt.Int64ObservableGauge("idemkit.kafka.commit.lag", metric.WithUnit("{record}"),
		metric.WithDescription("Records between the last committed offset and the partition's high watermark, at the last commit."),
		metric.WithInt64Callback(t.observe))
	return t, err
}

// set records a partition's lag.
func (t *lagTable) set(topic string, partition int32, lag int64) { t.Set(topic, partition, lag) }

// observe drops expired partitions and observes the others.
func (t *lagTable) observe(_ context.Context, o metric.Int64Observer) error {
	t.Each(func(_ telemetry.Partition, lag int64, attrs metric.ObserveOption) { o.Observe(lag, attrs) })
	return nil
}
