package idemkittest

import (
	"errors"
	"time"

	"github.com/idemkit/idemkit/consumer"
)

// Option configures a Kit. Every option states its default.
type Option interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	effects  func() int
	reset    func()
	newStore func(scope string) (consumer.Store, error)
	clock    *Clock
}

// WithEffects gives the kit the count of the handler's side effect: rows in a
// table, calls a fake gateway received, messages a fake broker holds. The kit
// reads it at the start and at the end of each scenario and requires it to have
// risen by exactly one. Required.
func WithEffects(count func() int) Option { return optFunc(func(c *config) { c.effects = count }) }

// WithReset gives the kit a function that restores the handler's state before
// each scenario (deletes the rows the last one wrote, empties the fake
// gateway), so that each scenario starts as the first did. It runs on the
// test's goroutine: it may call t.Fatal. The count of WithEffects is read after
// it. Default none: the state of one scenario stays for the next, and only the
// rise of the count is judged.
func WithReset(reset func()) Option { return optFunc(func(c *config) { c.reset = reset }) }

// WithStore makes the kit run its scenarios on stores newStore returns:
// Redis, PostgreSQL, DynamoDB, or a memory store configured the test's way.
// newStore is called once per scenario with a scope of its own
// ("idemkittest-<run>-<scenario>"), which the store must use
// (consumer.WithScope(scope)): each scenario then starts from no record, on a
// shared server too, and a transactional completion (keyed by scope and key)
// of one scenario is not found by the next.
//
// A store with consumer.WithLock is refused: the scenarios run handlers under
// their claims only. On a store whose clock the kit does not control, the scenarios that need a
// lease to run out wait for it, polling the record, so give the store a short
// lease (consumer.WithLease(time.Second)); New refuses a lease over 10s. The
// redelivery after the retention runs only when the retention is 10s or less,
// and is skipped otherwise (with a note). A memory store made with
// memory.WithClock(clock) waits for nothing when the kit is given the same
// clock with WithClock.
//
// Default: a memory store (store/memory) per scenario, with a lease of 1s and
// a Clock of the kit's own, so that no lease or retention costs wall time.
func WithStore(newStore func(scope string) (consumer.Store, error)) Option {
	return optFunc(func(c *config) { c.newStore = newStore })
}

// WithClock tells the kit that the stores of WithStore read their time from c
// (memory.WithClock(c)): the kit then advances c to make a lease run out or a
// record expire, instead of waiting. Default: the kit's own clock with its
// default stores; with WithStore, none (the kit waits), as with a nil c.
func WithClock(c *Clock) Option { return optFunc(func(cf *config) { cf.clock = c }) }

// DefaultLease is the lease of the kit's default memory stores. Only idemkit's
// engine waits on it in wall time: the scenarios where a lease is lost wait for
// the engine to cancel the handler, which it does at the lease less its margin.
const DefaultLease = time.Second

// maxWait is the longest lease, and the longest retention, the kit waits out on
// a store whose clock it does not control.
const maxWait = 10 * time.Second

func (c *config) validate() error {
	switch {
	case c.effects == nil:
		return errors.New("no effect count: give WithEffects a function that counts the handler's side effect (rows, calls to a fake gateway)")
	case c.clock != nil && c.newStore == nil:
		return errors.New("WithClock without WithStore: the kit's default stores have a clock of their own; give WithClock the clock of the stores WithStore makes")
	}
	return nil
}
