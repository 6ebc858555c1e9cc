package telemetry

import (
	"sync"
	"time"
)

// Partition names a Kafka topic partition.
type Partition struct {
	Topic     string
	Partition int32
}

// LagTable keeps the last commit lag reported for each partition, at most Max
// of them (the least recently reported goes when a new one comes), each dropped
// Expiry after its last report. E is what a plugin keeps beside the lag (its
// pre-built attributes), made once per partition.
type LagTable[E any] struct {
	max    int
	expiry time.Duration
	now    func() time.Time
	mk     func(Partition) E

	mu sync.Mutex
	m  map[Partition]*lagEntry[E]
}

type lagEntry[E any] struct {
	lag   int64
	at    time.Time
	extra E
}

// NewLagTable returns a table of at most max partitions, expiring after expiry on
// the clock now, making each partition's extra with mk.
func NewLagTable[E any](max int, expiry time.Duration, now func() time.Time, mk func(Partition) E) *LagTable[E] {
	return &LagTable[E]{max: max, expiry: expiry, now: now, mk: mk, m: make(map[Partition]*lagEntry[E])}
}

// Set records a partition's lag.
func (t *LagTable[E]) Set(topic string, partition int32, lag int64) {
	k, now := Partition{topic, partition}, t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.m[k]
	if !ok {
		if len(t.m) >= t.max {
			var oldest Partition
			first := true
			for p, o := range t.m {
				if first || o.at.Before(t.m[oldest].at) {
					oldest, first = p, false
				}
			}
			delete(t.m, oldest)
		}
		e = &lagEntry[E]{extra: t.mk(k)}
		t.m[k] = e
	}
	e.lag, e.at = lag, now
}

// Each drops the expired partitions and calls fn with every other one.
func (t *LagTable[E]) Each(fn func(p Partition, lag int64, extra E)) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, e := range t.m {
		if now.Sub(e.at) > t.expiry {
			delete(t.m, k)
			continue
		}
		fn(k, e.lag, e.extra)
	}
}
