package ordering

import "sync"

// Sequencer releases the messages of each lane one at a time, in the order they
// were pushed; messages of different lanes are released at once.
type Sequencer[M any] struct {
	mu    sync.Mutex
	lanes map[string][]M // the lane's waiting messages; present while one of it runs
}

// NewSequencer returns an empty sequencer.
func NewSequencer[M any]() *Sequencer[M] { return &Sequencer[M]{lanes: make(map[string][]M)} }

// Push adds m to lane. It reports true when m may run now (its lane was idle); else
// m waits for the messages of its lane pushed before it.
func (s *Sequencer[M]) Push(lane string, m M) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q, busy := s.lanes[lane]; busy {
		s.lanes[lane] = append(q, m)
		return false
	}
	s.lanes[lane] = nil
	return true
}

// Done says lane's running message is finished and returns the next one of the lane,
// which may run now, if any.
func (s *Sequencer[M]) Done(lane string) (next M, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, busy := s.lanes[lane]
	if !busy {
		return next, false
	}
	if len(q) == 0 {
		delete(s.lanes, lane)
		return next, false
	}
	next = q[0]
	var zero M
	q[0] = zero
	s.lanes[lane] = q[1:]
	return next, true
}

// Drop forgets every lane whose name drop accepts, with their waiting messages,
// and returns those messages (a revoked partition's).
func (s *Sequencer[M]) Drop(drop func(lane string) bool) []M {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []M
	for lane, q := range s.lanes {
		if drop(lane) {
			out = append(out, q...)
			delete(s.lanes, lane)
		}
	}
	return out
}

// Busy is the number of lanes with a message running.
func (s *Sequencer[M]) Busy() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.lanes)
}
