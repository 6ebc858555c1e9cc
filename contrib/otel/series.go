package idemotel

import (
	"sync"
	"sync/atomic"
)

// series keeps one value (pre-built measurement options) per combination of
// attribute values, so that an event after the first with the same attributes
// costs one map lookup with no lock and no allocation. The map is replaced, never
// changed, when a new combination appears; combinations are few and bounded (no
// attribute takes a key or another unbounded value), so replacing is rare.
type series[K comparable, V any] struct {
	m  atomic.Pointer[map[K]V]
	mu sync.Mutex // serialises the makers of new maps
	mk func(K) V
}

func newSeries[K comparable, V any](mk func(K) V) *series[K, V] {
	s := &series[K, V]{mk: mk}
	m := map[K]V{}
	s.m.Store(&m)
	return s
}

// get returns the value for k, making it on first use.
func (s *series[K, V]) get(k K) V {
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

// values returns the values made so far, in no particular order.
func values[K comparable, V any](s *series[K, V]) []V {
	m := *s.m.Load()
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
