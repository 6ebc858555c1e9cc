package idemkittest

import (
	"sync"
	"time"

	"github.com/idemkit/idemkit/store/memory"
)

// Clock is a fake clock for a memory store (memory.WithClock): it stands still
// until Advance moves it, so that a test makes a lease run out or a record
// expire at no cost in wall time. It is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

var _ memory.Clock = (*Clock)(nil)

// NewClock returns a clock that reads start until it is advanced.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	if c == nil {
		return time.Time{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d. A clock never goes back: a negative d
// changes nothing.
func (c *Clock) Advance(d time.Duration) {
	if c == nil || d <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
