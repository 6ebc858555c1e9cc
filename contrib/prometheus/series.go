package idemprom

import (
	"sync"
	"sync/atomic"
)

// series keeps the labelled children of one metric vector by their label values,
// so that an event after the first with the same labels costs one map lookup with
// no lock and no allocation. The map is replaced, never changed, when a new
// combination of labels appears; the combinations are few and bounded (no label
// takes a key or another unbounded value), so replacing is rare.
type series[K comparable, M any] struct {
	m  atomic.Pointer[map[K]M]
	mu sync.Mutex // serialises the makers of new maps
	mk func(K) M
}

func newSeries[K comparable, M any](mk func(K) M) *series[K, M] {
	s := &series[K, M]{mk: mk}
	m := map[K]M{}
	s.m.Store(&m)
	return s
}

// get returns the child for k, making it on first use.
func (s *series[K, M]) get(k K) M {
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
	next := make(map[K]M, len(old)+1)
	for ok, ov := range old {
		next[ok] = ov
	}
	next[k] = v
	s.m.Store(&next)
	return v
}
