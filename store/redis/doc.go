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
// Redis must keep what it is given: NewStore reads each node's configuration and
// warns (or, under WithEvictionCheck(EvictionRefuse), refuses) when
// maxmemory-policy may evict records, and logs a node that persists nothing. A full
// Redis under noeviction refuses writes; the store reports that as a
// *consumer.StoreError (an outage: nothing counts, nothing is dead-lettered), not
// as a corrupt record.
package redis
