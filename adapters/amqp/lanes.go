package amqp

import (
	"sync"
	"time"
)

// Ordered deliveries run in lanes (ordering.Sequencer), one at a time per lane.
// The lanes are the worker's, not a session's: when a channel is lost, a handler
// of the old session that is still running keeps its lane busy, and the
// redelivered copies of its lane's deliveries, which the new session receives in
// queue order, wait behind it. A lane's turn passes with release: to the next
// delivery of the lane, handed to the starter of the session it came in, or, when
// that session is over, dropped at once (the broker redelivers it) and the turn
// passes on.

// laneState is a session's part of the lanes: the deliveries whose turn came,
// for the starter, and the ones waiting in place to run again.
type laneState[V, T any] struct {
	mu      sync.Mutex
	queue   []*delivery[V, T] // their turn came: for the starter
	waiting map[*delivery[V, T]]*time.Timer
	closed  bool // the session is over: nothing more starts
	wake    chan struct{}
	timers  sync.WaitGroup // wait callbacks that may still run
	stopped chan struct{}  // the starter ended
}

// startLanes starts the session's starter.
func (f *flow[V, T]) startLanes() {
	f.lanes.wake = make(chan struct{}, 1)
	f.lanes.stopped = make(chan struct{})
	f.lanes.waiting = make(map[*delivery[V, T]]*time.Timer)
	go f.starter()
}

// starter submits the deliveries whose turn came, in turn order. It is apart from
// the engine's goroutines, which pass turns on, since a full window makes Submit
// wait for one of them.
func (f *flow[V, T]) starter() {
	l := &f.lanes
	defer close(l.stopped)
	for {
		l.mu.Lock()
		q, closed := l.queue, l.closed
		l.queue = nil
		l.mu.Unlock()
		for _, m := range q {
			if closed {
				f.release(m)
				continue
			}
			if err := f.pipe.Submit(m, m.item()); err != nil { // shutting down
				f.release(m)
			}
		}
		switch {
		case closed:
			return
		case len(q) > 0:
			continue
		}
		<-l.wake
	}
}

// enqueue hands m, whose turn came, to its session's starter; false when the
// session is over.
func (f *flow[V, T]) enqueue(m *delivery[V, T]) bool {
	l := &f.lanes
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return false
	}
	l.queue = append(l.queue, m)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return true
}

// later runs m again after d, keeping its lane's turn.
func (f *flow[V, T]) later(m *delivery[V, T], d time.Duration) {
	l := &f.lanes
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		f.release(m)
		return
	}
	l.timers.Add(1)
	l.waiting[m] = time.AfterFunc(d, func() {
		defer l.timers.Done()
		l.mu.Lock()
		delete(l.waiting, m)
		l.mu.Unlock()
		if !f.enqueue(m) {
			f.release(m)
		}
	})
	l.mu.Unlock()
}

// release ends m's turn in its lane (unordered: nothing to do). The next delivery
// of the lane goes to its session's starter; one of a session that is over is
// dropped (the broker redelivers it with the rest of its channel) and the turn
// passes on.
func (f *flow[V, T]) release(m *delivery[V, T]) {
	for m.lane != "" {
		next, ok := f.w.lanes.Done(m.lane)
		if !ok || next.f.enqueue(next) {
			return
		}
		m = next
	}
}

// stopLanes ends the session's part of the lanes once its engine stopped: what
// waits to start or to run again is dropped, its turn passed on.
func (f *flow[V, T]) stopLanes() {
	l := &f.lanes
	l.mu.Lock()
	l.closed = true
	var dropped []*delivery[V, T]
	for m, t := range l.waiting {
		if t.Stop() {
			l.timers.Done()
			dropped = append(dropped, m)
		}
	}
	clear(l.waiting)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	for _, m := range dropped {
		f.release(m)
	}
	l.timers.Wait()
	<-l.stopped
}
