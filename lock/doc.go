// Package lock guards long-running jobs with distributed locks on redsync: Do
// acquires a lock, extends it from a watchdog every expiry/3 while the job runs,
// cancels the job's context the moment an extension fails, and unlocks with a
// fresh, bounded context.
//
// Over several independent Redis nodes (not replicas of one another) a lock needs
// a quorum, a majority of the nodes (Redlock). Acquisition fails fast when so many
// nodes are unreachable that no quorum is possible.
//
// The errors tell the three failures apart: ErrNotAcquired (another holder has the
// lock), ErrLost (*LostError: the lock was lost while the job ran) and
// ErrUnreachable (*UnreachableError: too few nodes answered).
//
// Honest bounds: a lock is a lease on the nodes' clocks. A holder paused longer
// than the expiry (a stop-the-world pause, SIGSTOP, a VM migration) wakes up
// believing it still holds the lock until its watchdog's next tick; a clock jump
// on a node can end a lock early; a node restarted without persistence forgets its
// locks, and failover to a replica can lose a fresh one. So a lock keeps two live
// holders apart only in the common case. Safety comes from fencing: the job passes
// the fence of its idempotency record (consumer.FenceFromContext; redsync has no
// fencing token) to every store it writes, which refuses a smaller one.
//
// *Locker implements consumer.Locker: consumer.WithLock(locker) runs handlers
// under a lock per key.
package lock
