package lock

import (
	"fmt"
	"log/slog"
	"time"
)

// Option configures a Locker. Every option states its default.
type Option interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	expiry        time.Duration
	tries         int
	retryDelay    time.Duration
	unlockTimeout time.Duration
	onExtend      func(name string)
	logger        *slog.Logger
}

func defaults() config {
	return config{expiry: 8 * time.Second, tries: 3, retryDelay: 200 * time.Millisecond, unlockTimeout: 2 * time.Second}
}

func (c *config) validate() error {
	switch {
	case c.expiry < 30*time.Millisecond:
		return fmt.Errorf("%w: WithExpiry(%v): give at least 30ms", ErrConfig, c.expiry)
	case c.tries < 1:
		return fmt.Errorf("%w: WithTries(%d): give at least 1", ErrConfig, c.tries)
	case c.retryDelay <= 0:
		return fmt.Errorf("%w: WithRetryDelay(%v): give a positive duration", ErrConfig, c.retryDelay)
	case c.unlockTimeout <= 0:
		return fmt.Errorf("%w: WithUnlockTimeout(%v): give a positive duration", ErrConfig, c.unlockTimeout)
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// WithExpiry sets how long a lock lives on its nodes without extension; the
// watchdog extends it every expiry/3. A crashed holder's lock is free again after
// at most this long. Each acquisition attempt and each extension waits at most
// expiry/4 for the nodes, and a holder's context is cancelled a margin of
// expiry/10 + expiry/100 + 2ms before the lock would run out on the nodes (see
// the package doc). Default 8s, minimum 30ms.
func WithExpiry(d time.Duration) Option { return optFunc(func(c *config) { c.expiry = d }) }

// WithTries sets how many times an acquisition tries while the lock is held
// elsewhere. Default 3.
func WithTries(n int) Option { return optFunc(func(c *config) { c.tries = n }) }

// WithRetryDelay sets the pause between tries (with jitter over its upper half).
// Default 200ms.
func WithRetryDelay(d time.Duration) Option { return optFunc(func(c *config) { c.retryDelay = d }) }

// WithUnlockTimeout bounds the unlock after a job: release returns after at most
// this long even if a node does not answer (the lock then expires on that node by
// itself). Default 2s.
func WithUnlockTimeout(d time.Duration) Option {
	return optFunc(func(c *config) { c.unlockTimeout = d })
}

// WithOnExtend calls fn after every successful extension (metrics, tests). It is
// called from the watchdog and must not block. Default none.
func WithOnExtend(fn func(name string)) Option { return optFunc(func(c *config) { c.onExtend = fn }) }

// WithLogger sets the logger. Default: logs are discarded.
func WithLogger(l *slog.Logger) Option { return optFunc(func(c *config) { c.logger = l }) }
