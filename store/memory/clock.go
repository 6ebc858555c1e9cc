package memory

import (
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/typednil"
)

// Clock tells a Store the time: its leases, retention and record times all come
// from it. Tests pass a fake one (package idemkittest has Clock) so that a lease
// or a retention runs out when the test says, not after that much wall time.
type Clock interface {
	Now() time.Time
}

// WithClock makes c the store's clock. Default: the local clock (time.Now).
//
// Only the store's side moves with c: idemkit's engine keeps each attempt's local
// deadline, its lease renewals and its call bounds on the real clock, as it does
// with every store. Advancing c past a lease therefore makes the record
// claimable by another owner at once (the store sees the lease run out), while
// the attempt that held it, if it is still running, carries on until the real
// clock or a refused renewal tells it otherwise: what a paused or partitioned
// worker looks like to a store.
func WithClock(c Clock) consumer.Option { return consumer.StoreSetting(clockKey{}, clockSetting{c}) }

// clockKey carries WithClock's value in the store's Settings, as a
// clockSetting so that WithClock(nil) is told from no WithClock.
type clockKey struct{}

type clockSetting struct{ c Clock }

// clockOf reads WithClock's value from s: the local clock unless set.
func clockOf(s consumer.Settings) (func() time.Time, error) {
	v, ok := s.StoreSetting(clockKey{}).(clockSetting)
	switch {
	case !ok:
		return time.Now, nil
	case v.c == nil || typednil.Is(v.c):
		return nil, configError("nil clock: omit WithClock for the local clock")
	}
	return v.c.Now, nil
}
