// Package lock guards long-running jobs with distributed locks on redsync: Do
// acquires a lock, extends it from a watchdog while the job runs, cancels the
// job's context as soon as the lock is lost or could be, and unlocks when the
// job returns or panics.
//
// Over several independent Redis nodes (not replicas of one another) a lock needs
// a quorum, a majority of the nodes (Redlock). Acquisition fails fast when so many
// nodes are unreachable that no quorum is possible.
//
// The errors tell the three failures apart: ErrNotAcquired (another holder has the
// lock), ErrLost (*LostError: the lock was lost while the job ran) and
// ErrUnreachable (*UnreachableError: too few nodes answered in time).
//
// # When the job's context is cancelled
//
// The watchdog extends the lock every expiry/3 (after a failed extension it
// tries again after expiry/12). The job's context is cancelled with a *LostError
// cause:
//
//   - at once, when a quorum of nodes answers an extension with "not yours":
//     another holder has the lock, or its key vanished there (a node restarted
//     without persistence, a failover to a replica that never saw it);
//   - otherwise at the holder's local deadline, if no extension succeeded before
//     it, whether or not a call to the nodes is still in flight.
//
// The local deadline is the time the last successful acquisition or extension
// was sent, plus the expiry, minus a margin of expiry/10 + expiry/100 + 2ms (68ms
// for a 600ms lock, 882ms for the default 8s). The expiry/100 + 2ms is the clock
// drift allowance: redsync's own Until() already takes off expiry/100 (its drift
// factor), and the deadline is Until() minus a further expiry/10 + 2ms. The
// key cannot expire on a node before send time + expiry by that node's clock, so
// as long as the clocks of this process and the nodes run at rates within 1% of
// each other, the job is told to stop at least expiry/10 + 2ms before another
// holder can take the lock: that is its time to notice and stop.
//
// # Every call is bounded by the library
//
// An acquisition attempt and an extension are each waited for at most expiry/4;
// an unlock at most WithUnlockTimeout. Each call runs in a goroutine of its own and
// the library stops waiting at its bound, so a partitioned node never holds up a
// cancellation or a release. An acquisition abandoned at its bound reports
// ErrUnreachable; when its reply arrives later it is undone (unlocked), so a late
// success leaves no lock behind (and a node that never answers again lets the key
// expire by itself).
//
// Give the clients ContextTimeoutEnabled: true (redis.Options). go-redis ignores
// context deadlines on socket reads and writes unless it is set; with it, a call
// the library abandons also stops in the client at the same bound. Without it,
// the library still stops waiting at its bound, and the abandoned call finishes in
// the background when the client's ReadTimeout or WriteTimeout ends (3s by
// default), holding a goroutine and a connection until then; with those timeouts
// disabled (-1), until the connection breaks.
//
// # Honest bounds
//
// A lock is a lease on the nodes' clocks. A clock jump on a node can end a lock
// early; a node restarted without persistence forgets its locks, and failover to a
// replica can lose a fresh one (the next extension then answers "not yours" and
// the holder is cancelled, but another holder may have started first). A holder
// paused longer than the margin (SIGSTOP, a stop-the-world pause, a VM migration)
// cannot be told anything while it is paused: when it resumes, its deadline timer
// fires and its context is cancelled, but a step already past its last look at the
// context (a write on its way to a database) still happens, possibly after another
// holder has taken over. So a lock keeps two live holders apart only in the
// common case; redsync has no fencing token.
//
// Safety comes from fencing. With consumer.WithLock, the job passes the fence of
// its idempotency record (consumer.FenceFromContext), which grows with every
// claim and takeover of that record, to the store it writes, which refuses a
// fence no larger than the last one it accepted (package fence). That orders the
// writes of one key's attempts, so it protects what the key owns (a row keyed by
// the idempotency key); it does not order writes of different keys to a shared
// row, because every record counts its own fences from 1.
//
// *Locker implements consumer.Locker: consumer.WithLock(locker) runs handlers
// under a lock per key.
package lock
