package telemetry

import (
	"sync"
	"sync/atomic"
)

// Series keeps one value (a labelled metric child, pre-built measurement options)
// per combination of label values, so that an event after the first with the same
// labels costs one map lookup with no lock and no allocation. The map is replaced,
// never changed, when a new combination appears; the combinations are few and
// bounded (no label takes a key or another unbounded value), so replacing is rare.
type Series[K comparable, V any] struct {
	m  atomic.Pointer[map[K]V]
	mu sync.Mutex // serialises the makers of new maps
	mk func(K) V
}

// NewSeries returns a series that makes the value of a new combination with mk.
func NewSeries[K comparable, V any](mk func(K) V) *Series[K, V] {
	s := &Series[K, V]{mk: mk}
	m := map[K]V{}
	s.m.Store(&m)
	return s
}

// Get returns the value for k, making it on first use.
func (s *Series[K, V]) Get(k K) V {
	if v, ok := (*s.m.Load())[k]; ok {
		return v
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.m.Load()
	if v, ok := old[k]; ok {
		return v
	}
	v := s.mk(k)
	next := make(map[K]V, len(old)+1)
	for ok, ov := range old {
		next[ok] = ov
	}
	next[k] = v
	s.m.Store(&next)
	return v
}

// Values returns the values made so far, in no particular order.
func (s *Series[K, V]) Values() []V {
	m := *s.m.Load()
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
