package ordering

import "sync"

// Lanes keeps the messages of each lane in order: one at a time per lane, in the
// order they were pushed, lanes side by side. It is Sequencer without a lock, for a
// caller that holds a lock of its own around every call (the Kafka consumer keeps
// its lanes under the lock of its partitions' bookkeeping). K names a lane: any
// comparable value, so that a lane needs no string built per message. The zero
// Lanes is empty and ready to use.
type Lanes[K comparable, M any] struct {
	lanes map[K][]M // the lane's waiting messages; present while one of it runs
}

// Push adds m to lane. It reports true when m may run now (its lane was idle); else
// m waits for the messages of its lane pushed before it.
func (l *Lanes[K, M]) Push(lane K, m M) bool {
	if q, busy := l.lanes[lane]; busy {
		l.lanes[lane] = append(q, m)
		return false
	}
	if l.lanes == nil {
		l.lanes = make(map[K][]M)
	}
	l.lanes[lane] = nil
	return true
}

// Done says lane's running message is finished and returns the next one of the
// lane, which may run now, if any.
func (l *Lanes[K, M]) Done(lane K) (next M, ok bool) {
	q, busy := l.lanes[lane]
	if !busy {
		return next, false
	}
	if len(q) == 0 {
		delete(l.lanes, lane)
		return next, false
	}
	next = q[0]
	var zero M
	q[0] = zero
	if len(q) == 1 {
		q = nil // the lane runs its last waiting message: drop the array
	} else {
		q = q[1:]
	}
	l.lanes[lane] = q
	return next, true
}

// Drop forgets every lane whose name drop accepts, with their waiting messages,
// and returns those messages.
func (l *Lanes[K, M]) Drop(drop func(lane K) bool) []M {
	var out []M
	for lane, q := range l.lanes {
		if drop(lane) {
			out = append(out, q...)
			delete(l.lanes, lane)
		}
	}
	return out
}

// Busy is the number of lanes with a message running.
func (l *Lanes[K, M]) Busy() int { return len(l.lanes) }

// Sequencer releases the messages of each lane one at a time, in the order they
// were pushed; messages of different lanes are released at once. It is Lanes
// named by strings, with a lock of its own.
type Sequencer[M any] struct {
	mu sync.Mutex
	l  Lanes[string, M]
}

// NewSequencer returns an empty sequencer.
func NewSequencer[M any]() *Sequencer[M] { return &Sequencer[M]{} }

// Push adds m to lane. It reports true when m may run now (its lane was idle); else
// m waits for the messages of its lane pushed before it.
func (s *Sequencer[M]) Push(lane string, m M) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.l.Push(lane, m)
}

// Done says lane's running message is finished and returns the next one of the lane,
// which may run now, if any.
func (s *Sequencer[M]) Done(lane string) (next M, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.l.Done(lane)
}

// Drop forgets every lane whose name drop accepts, with their waiting messages,
// and returns those messages (a revoked partition's).
func (s *Sequencer[M]) Drop(drop func(lane string) bool) []M {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.l.Drop(drop)
}

// Busy is the number of lanes with a message running.
func (s *Sequencer[M]) Busy() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.l.Busy()
}
