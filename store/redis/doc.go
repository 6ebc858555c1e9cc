// Package redis keeps idempotency records in Redis: a single server, a
// Sentinel-managed primary or a Redis Cluster, through any go-redis
// UniversalClient. Every transition is one of the Lua scripts of package lua (the
// Redis store's state machine, documented there), sent in batches: a claim batch
// or a settle batch is one round trip per Cluster slot it touches.
//
// The package name is redis, as go-redis's is; import it under another name when a
// file uses both:
//
//	import (
//		goredis "github.com/redis/go-redis/v9"
//		redisstore "github.com/idemkit/idemkit/store/redis"
//	)
//
//	store, err := redisstore.NewStore(goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"}),
//		consumer.WithScope("payments"))
//
// What each call costs Redis: a claim of a new key is one SET NX (a batch's in one
// pipeline); a key that exists goes through the begin script. A completion of a
// fresh claim is, on Redis 8.4 and later and Valkey 8.1 and later, one SET ...
// IFEQ (the server compares the record with the one the claim wrote, no
// script); on older servers (Redis 6.2 to 8.2, Valkey 7.2 and 8.0) the complete
// script makes the same comparison. The store asks the server which it has
// (COMMAND DOCS) when it loads its scripts, or with its first completion. A
// claim marked consumer.Claim.ReadFirst, as the HTTP middleware's are, reads the
// record first, and a replay of a completed key costs one GET.
//
// Redis must keep what it is given: NewStore reads each node's configuration and
// warns (or, under WithEvictionCheck(EvictionRefuse), refuses) when
// maxmemory-policy may evict records, and logs a node that persists nothing. A full
// Redis under noeviction refuses writes; the store reports that as a
// *consumer.StoreError (an outage: nothing counts, nothing is dead-lettered), not
// as a corrupt record.
//
// # Durability levels
//
// What a Store waits for before it reports a transition. By default (no
// WithReplicaAcks) an outcome is reported once the primary applied it. Redis replicates asynchronously, so a failover in the moment after a
// completion may promote a replica that never received it, and that key's handler
// runs again on its next delivery.
//
// WithReplicaAcks(n, timeout) makes every settlement (a completion, or a recorded
// failure) wait, after the primary applied it, until n replicas have acknowledged
// the write (Redis WAIT), for at most timeout, and so does a claim answered with
// an outcome (a duplicate, an exhausted key). WithReplicaAcksOnClaims makes
// granted claims wait too. What a timeout means is fixed: the transition has been applied on the
// primary but is reported as not durable, as a *consumer.StoreError wrapping a
// *NotDurableError (both errors.Is ErrNotDurable and consumer.ErrStoreUnavailable).
// The engine treats that answer like any unclear settlement reply: it sends the
// settlement again while the claim's lease lives (the handler is never run again
// for it; the resent completion finds the record completed and waits for the
// replicas once more), and reports the message as a retryable store error once
// the lease has run out, so nothing is acked or committed as done on a completion
// that only the primary holds. Its next delivery finds the record completed, or,
// after a failover that lost it, runs the handler again: that re-run is the one
// thing a not-durable answer leaves open. WAIT counts replicas that received the
// write, not ones that wrote it to disk; with Redis Cluster it is sent to every
// primary a call wrote to.
package redis
