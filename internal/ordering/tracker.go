package ordering

import (
	"fmt"
	"slices"
	"sync"
)

// Tracker follows positions that arrive in increasing order (offsets, delivery
// tags) and settle in any order, and knows the end of their settled prefix.
type Tracker struct {
	mu      sync.Mutex
	pos     []int64 // positions in flight, increasing
	settled []bool
	head    int   // pos[:head] are gone
	through int64 // every position up to and including this one is settled
	started bool
}

// Add follows pos, which must be larger than every position added before.
func (t *Tracker) Add(pos int64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.pos); n > t.head && pos <= t.pos[n-1] {
		return fmt.Errorf("ordering: position %d added after %d", pos, t.pos[n-1])
	}
	if !t.started {
		t.through, t.started = pos-1, true
	}
	t.pos = append(t.pos, pos)
	t.settled = append(t.settled, false)
	return nil
}

// Settle marks pos settled. It returns the end of the settled prefix (every
// position up to and including it is settled) and whether Settle moved it.
func (t *Tracker) Settle(pos int64) (through int64, moved bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	// pos[head:] increase: find pos by halving (a partition can hold thousands in
	// flight, and every one of them is settled once).
	if i, found := slices.BinarySearch(t.pos[t.head:], pos); found {
		t.settled[t.head+i] = true
	}
	for t.head < len(t.pos) && t.settled[t.head] {
		t.through = t.pos[t.head]
		t.head++
		moved = true
	}
	if t.head > 1024 && t.head*2 > len(t.pos) { // drop what is gone, now and then
		t.pos = append(t.pos[:0], t.pos[t.head:]...)
		t.settled = append(t.settled[:0], t.settled[t.head:]...)
		t.head = 0
	}
	return t.through, moved
}

// Through is the end of the settled prefix, and false before any position was added.
func (t *Tracker) Through() (int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.through, t.started
}

// InFlight is the number of positions added and not settled.
func (t *Tracker) InFlight() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for i := t.head; i < len(t.pos); i++ {
		if !t.settled[i] {
			n++
		}
	}
	return n
}
