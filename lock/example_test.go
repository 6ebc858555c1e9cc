package lock_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/idemkit/idemkit/lock"
	"github.com/redis/go-redis/v9"
)

// A nightly job that must not run twice at once, over three independent nodes.
func ExampleLocker_Do() {
	var nodes []redis.UniversalClient
	for _, addr := range []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"} {
		nodes = append(nodes, redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 500 * time.Millisecond,
			ContextTimeoutEnabled: true})) // calls stop at the lock's own bounds
	}
	locker, err := lock.New(nodes, lock.WithExpiry(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	err = locker.Do(context.Background(), "nightly-billing", func(ctx context.Context) error {
		// ... work for minutes; stop when ctx is done: the lock was lost
		return nil
	})
	switch {
	case errors.Is(err, lock.ErrNotAcquired):
		log.Print("another instance runs it")
	case errors.Is(err, lock.ErrLost):
		log.Print("lost the lock mid-run; the next run takes over")
	case errors.Is(err, lock.ErrUnreachable):
		log.Print("lock nodes down; try later")
	}
}
