package kafka

// laneTable keeps the records of each lane (see laneOf) in order: one at a time
// per lane, in the order taken, lanes side by side. It does what ordering.Lanes
// does, specialised to the consumer's lanes and records, because it runs twice
// per record: an open-addressing table of the busy lanes, probed from the lane's
// own low bits (lane names are maphash values already), with the waiting records
// chained through the records themselves. Pushing and finishing a record cost a
// short probe of one array and no allocation; a map cost four hash lookups and
// the churn of inserting and deleting every lane. The caller holds c.mu. The
// zero laneTable is empty and ready to use.
type laneTable[V any] struct {
	slots []laneSlot[V] // a power of two long, at most half used
	busy  int           // slots used
}

// laneSlot is a busy lane: one of its records runs, and head to tail wait.
type laneSlot[V any] struct {
	name       uint64
	used       bool
	head, tail *record[V]
}

// find returns the slot of lane name, or the free slot where it would go.
func (t *laneTable[V]) find(name uint64) (int, bool) {
	mask := len(t.slots) - 1
	for i := int(name) & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if !s.used {
			return i, false
		}
		if s.name == name {
			return i, true
		}
	}
}

// push adds r to lane name. It reports true when r may run now (its lane was
// idle); else r waits for the records of its lane pushed before it.
func (t *laneTable[V]) push(name uint64, r *record[V]) bool {
	if 2*(t.busy+1) > len(t.slots) {
		t.grow()
	}
	i, ok := t.find(name)
	s := &t.slots[i]
	if !ok {
		*s = laneSlot[V]{name: name, used: true}
		t.busy++
		return true
	}
	r.laneNext = nil
	if s.tail == nil {
		s.head = r
	} else {
		s.tail.laneNext = r
	}
	s.tail = r
	return false
}

// done says lane name's running record finished and returns the next one of the
// lane, which may run now, if any; without one the lane is idle again.
func (t *laneTable[V]) done(name uint64) (*record[V], bool) {
	if t.busy == 0 {
		return nil, false
	}
	i, ok := t.find(name)
	if !ok {
		return nil, false
	}
	s := &t.slots[i]
	next := s.head
	if next == nil {
		t.remove(i)
		return nil, false
	}
	s.head, next.laneNext = next.laneNext, nil
	if s.head == nil {
		s.tail = nil
	}
	return next, true
}

// remove frees slot i, moving back the slots after it that probed past it, so
// that no probe needs a tombstone.
func (t *laneTable[V]) remove(i int) {
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j].used; j = (j + 1) & mask {
		home := int(t.slots[j].name) & mask
		// Slot j stays when its home lies cyclically in (i, j].
		if (i < j && i < home && home <= j) || (i > j && (home > i || home <= j)) {
			continue
		}
		t.slots[i] = t.slots[j]
		i = j
	}
	t.slots[i] = laneSlot[V]{}
	t.busy--
}

// grow doubles the table (64 slots at first) and places the busy lanes again.
func (t *laneTable[V]) grow() {
	old := t.slots
	t.slots = make([]laneSlot[V], max(64, 2*len(old)))
	for _, s := range old {
		if s.used {
			i, _ := t.find(s.name)
			t.slots[i] = s
		}
	}
}
