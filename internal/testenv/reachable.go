package testenv

import (
	"runtime"
	"sync"
	"time"
	"weak"
)

// Handed keeps weak pointers to what a consumer hands its handler, to ask later
// how many outlive their use: a long-running consumer must let go of what it
// finished with. It is safe for concurrent use.
type Handed[T any] struct {
	mu sync.Mutex
	ps []weak.Pointer[T]
}

// Add records p.
func (h *Handed[T]) Add(p *T) {
	h.mu.Lock()
	h.ps = append(h.ps, weak.Make(p))
	h.mu.Unlock()
}

// Len is how many were added.
func (h *Handed[T]) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ps)
}

// Reachable counts the objects added that a collection leaves, collecting again
// for up to a second while more than most are left (work still settling may keep
// its objects a little longer), and returns the last count.
func (h *Handed[T]) Reachable(most int) int {
	h.mu.Lock()
	ps := h.ps
	h.mu.Unlock()
	live := 0
	for try := 0; try < 20; try++ {
		runtime.GC()
		runtime.GC()
		live = 0
		for _, p := range ps {
			if p.Value() != nil {
				live++
			}
		}
		if live <= most {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return live
}
