package ordering

import "slices"

// SettleAll marks every position of ps settled, under one lock, and returns the
// end of the settled prefix and whether it moved, as Settle does for one. It finds
// each position by binary search: behind a position that stays unsettled (a
// stalled message) the positions in flight pile up, and a scan for each would cost
// their number. Positions not in flight are ignored.
func (t *Tracker) SettleAll(ps []int64) (through int64, moved bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	live := t.pos[t.head:]
	for _, p := range ps {
		if i, ok := slices.BinarySearch(live, p); ok {
			t.settled[t.head+i] = true
		}
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
