// Package retry holds the waiting that the consumer and the adapters share:
// exponential backoff with jitter, and a sleep that ends with its context.
package retry

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is the pause before retry n (from 1): base doubled n-1 times, capped at
// max, with jitter over its upper half so that workers retrying together spread out.
func Backoff(base, max time.Duration, n int) time.Duration {
	d := base << min(max0(n-1), 30)
	if d <= 0 || d > max {
		d = max
	}
	return d/2 + rand.N(d/2+1)
}

func max0(n int) int {
	if n < 0 {
		return 0
	}
	return n
}

// Sleep waits d and reports true, or reports false as soon as ctx is done.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
