// Package lua is the Redis side of idemkit's state machine: one embedded Lua script
// per transition (begin, complete, fail, extend, release, peek), one Go handle per
// script, and the decoding of their replies into typed values.
//
// Nothing else in the module changes idemkit's Redis state: the consumer package's
// Redis store calls the functions here. Every transition is one script, so no Go code
// ever does check-then-set; every script reads the Redis server's clock (TIME), so
// all workers share one clock for leases.
//
// Scripts take several records per call so that a batch costs one call per hash slot
// group: on a single Redis server (or Sentinel-managed primary) a whole batch is one
// call; on Redis Cluster the records of one call share a hash slot, and the calls of
// one batch travel in one pipeline that go-redis splits per node. Scripts are run with
// EVALSHA and reloaded when the server answers NOSCRIPT, inside pipelines too (go-redis
// does not fall back to EVAL there).
//
// Record layout (a hash at <prefix>:{<scope>:<key>}):
//
//	s  state: started, completed, failed, retry
//	o  owner token of the current attempt
//	f  fence, +1 on every claim or takeover
//	a  attempts counted so far
//	p  payload fingerprint ('' when fingerprinting is off)
//	l  lease deadline, Redis server time in ms (meaningful while started)
//	lk '1' when the current claim was made under the key's distributed lock, else '0'
//	r  encoded result (completed)
//	d  '' or the size of a result too large to keep (completed)
//	e  error text (failed, retry)
//	k  failure kind: 'p' permanent, 'x' attempts exhausted (failed)
//	c  created, u  updated (absent until the first change): Redis server time in ms
//
// TTL: a claim sets lease + retention and every renewal sets it again, so a record
// completed or failed within its lease is kept at least the retention; one settled
// after its lease ran out gets the retention from then.
package lua
