// Package lua is the Redis side of idemkit's state machine: one embedded Lua script
// per transition (begin, complete, fail, extend, release, peek, and the operator's
// unstick, forget and rerun), one Go handle per script, the record layout, and the
// decoding of replies into typed values.
//
// Nothing else in the module changes idemkit's Redis state: the Redis store
// (package store/redis, the only package of the library that imports this one)
// calls the functions here. Every transition is one script, so no Go code
// ever does check-then-set.
//
// Scripts take several records per call so that a batch costs one call per hash slot
// group: on a single Redis server (or Sentinel-managed primary) a whole batch is one
// call; on Redis Cluster the records of one call share a hash slot, and the calls of
// one batch travel in one pipeline that go-redis splits per node. A call's per-record
// arguments travel packed in one string argument, so a batch costs the client a few
// allocations, not a few per record. Scripts are run with EVALSHA and reloaded when
// the server answers NOSCRIPT, inside pipelines too, and on every shard of a Ring.
// The runner stops waiting for a reply when the caller's context is done, whether or
// not the client honours context deadlines.
//
// # Records
//
// A record is one Redis string at <prefix>:{<scope>:<key>} in a compact binary layout,
// version 1 (Decode reads it; the layout is spelled out beside Version in record.go,
// and record.lua reads and writes it inside the scripts):
//
//	0  version<<4 | state        1 started, 2 completed, 3 failed, 4 retry, 5 forgotten
//	1  flags                     1 locked, 2 permanent, 4 result dropped, 8 fingerprint, 16 history,
//	                             32 operator notes, 64 counted (started: the claim is an attempt)
//	2  fence (4)   6 attempts (2)   8 created (4)   12 updated (4, unix seconds)
//	16 fingerprint (16, when flagged): the first 16 bytes of the payload's SHA-256
//	   operator notes (when flagged): count (1), then newest first: time (4), length (2), text
//	   started:   owner length (1), owner, retention in ms (6), [error history]
//	   completed: the encoded result, or the reason it was not kept
//	   failed, retry: error history: count (1), then newest first: time (4), length (2), text
//	   forgotten: [error history] (an operator removed the record; the fence stays)
//
// A completed record of a fingerprinted key with an empty result is 32 bytes. A
// settled record keeps no owner and no lease; a completed one keeps no error history.
// Error texts are cut to MaxErrorText bytes (older history entries to HistoryText)
// with a marker, so that an enormous error cannot make a later step fail. Times in
// records are the writing worker's clock and only informational: nothing decides by
// them.
//
// # Leases live in the TTL
//
// A started record's TTL is lease + retention, set by the claim and by each renewal
// on the Redis server's clock, and the record itself carries the retention its
// claimer used. Its lease has run out when its PTTL falls below that recorded
// retention. So:
//
//   - Leases run on one clock, the Redis server's, for every worker: nobody compares
//     a worker's clock with another's.
//   - A fresh key is claimed without a script: one plain SET NX PX of the started
//     record the caller built, Redis's cheapest write, a whole batch in one
//     pipeline. There is no record to read and nothing to decide, and the NX makes
//     exactly one claimer win; the lease is the TTL, on the server's clock. Only
//     the keys that exist go through the begin script's read-decide-write, in a
//     second round trip that batches without existing keys never pay. Reading the
//     retention from the record, not from the reader's settings, is why a deploy
//     that changes the retention cannot make another worker's live lease look
//     expired (or an expired one live).
//   - A completion rewrites the record with SET ... KEEPTTL GET and checks the value
//     it replaced: unless that was a started record of the same owner token, the old
//     value is put back within the same script, so the change is all or nothing. Kept,
//     the TTL is what is left of the lease plus the retention, which is at least the
//     retention; a completion made after the caller's own deadline (the lease may
//     have run out) starts the retention afresh. The completion of a fresh claim
//     sends the started record its claim wrote, and the check is that the value
//     replaced is that very string. Where the server has SET ... IFEQ (Redis 8.4
//     and later, Valkey 8.1 and later; asked with COMMAND DOCS) the server makes
//     that check itself: the completion is one plain SET IFEQ KEEPTTL, no script,
//     and only one that finds something else goes to the script (cas.go).
//   - A claim marked ReadFirst (the HTTP middleware's) reads the record first: a
//     completed or failed record whose fingerprint matches is answered from that
//     GET, decoded as the begin script reads it, with no script and no write (a
//     settled record changes only by an operator's rerun or forget); the rest
//     goes on as above.
//   - A call sent again after a lost reply finds its own work: a claim finds its own
//     owner token, a settlement or release the record moved on at its own fence.
//
// # Which servers get which completion
//
// Claims are the same everywhere: one SET NX PX per fresh key, pipelined. The
// completions of fresh claims differ by server:
//
//   - Redis 8.4 and later, Valkey 8.1 and later (SET takes IFEQ): one plain SET
//     IFEQ KEEPTTL per record, pipelined, no script; a message costs the server
//     what two plain SETs cost.
//   - Redis 6.2 to 8.2, Valkey 7.2 and 8.0, and servers that refuse COMMAND DOCS:
//     the complete script, one EVALSHA per batch, one SET KEEPTTL GET per record
//     inside it. A script pays per record for what a pipelined SET does not: the
//     key made a Lua string (Redis's Lua hashes every byte of every string it
//     makes), the call from Lua into Redis, and its reply made a Lua value. On
//     Redis 7.0 a script that only writes each record with SET KEEPTTL, checking
//     nothing, already costs about 1.4 times the two plain SETs per message
//     (claim included, measured beside make bench's floor); this one costs
//     about 1.5 to 1.8 times, as the machine's load varies. It keeps its work
//     per record to two substrings of the packed argument, one redis.pcall and
//     one compare, and answers a batch whose records are all OK with a single 0.
//
// # Operator notes
//
// An operator's unstick, forget or rerun (Runner.Operate) puts its note ("rerun by
// alice: fixed in v2") first in the record's operator notes, not in its error
// history, which holds attempts' errors only. Every script that rewrites a record
// carries the notes over: claims and takeovers (and the fresh start after a
// forget), failures, releases, renewals and completions, so they stay as long as
// the record lives. A record keeps the newest NotesLen notes, each cut to
// MaxNoteText bytes: at most 10,289 bytes of notes. A record no operator changed has
// no flag 32 and no notes block, so notes cost it nothing; a completion, which the
// client builds whole and writes with SET ... KEEPTTL GET, sees flag 32 in the value
// it replaced (one byte compare on its fast path) and only then writes the record
// once more with the notes.
//
// # When Redis refuses a write
//
// Redis at its maxmemory under maxmemory-policy noeviction (the policy the store
// asks for: the others evict records) refuses every command that may take more
// memory, SET among them, with "OOM command not allowed when used memory >
// 'maxmemory'". What that does to a script depends on whether it declares flags
// (a "#!lua flags=..." first line, Redis 7 and later):
//
//   - A script without flags, as these are, starts whatever the memory. Redis
//     notes at the call's start whether it is over the limit, and then refuses a
//     command that may take memory only while the script has written nothing:
//     once a script has written, none of its later commands is refused for memory
//     (Redis cannot stop a script half way, and never rolls one back). A command
//     that takes no memory, PEXPIRE or DEL, is never refused. Redis 6.2 does the
//     same.
//   - A script with flags is refused at its start, before it runs, unless it
//     declares allow-oom (then nothing in it is refused) or no-writes.
//
// Both give a full Redis's refusals all or nothing. These scripts declare no flags,
// so that Redis 6.2 (the first with SET ... GET) runs them too, and rely on the
// first rule: every transition's first write is a SET (begin's SET NX, complete's
// SET ... KEEPTTL GET, fail's, release's and the operator's SET, and extend's SET
// PX), so a full Redis refuses a call at its first write, before it changed any
// record. Extend writes the record again with its new TTL rather than only giving
// it one: Redis would run a PEXPIRE, and a claim kept alive while its completion
// cannot be stored would hold its caller for as long as Redis stays full. Refused,
// a full Redis is to the engine what an unreachable one is: it sends a refused
// settlement again while the claim is live, and the claim runs out at its lease.
//
// The refusal is the call's reply. redis.call raises it, which ends the script;
// where a script reads or writes with redis.pcall, it tells WRONGTYPE (the key
// holds another type: not a record, CORRUPT) from every other error, which it
// returns whole as the call's reply. The store answers such a reply as unavailable
// (retryable), never as a corrupt record. Peek and the scans only read, and work
// on a full Redis.
//
// An error that ended a call of several records after it had changed some (not
// memory, by the rule above: a script bug, say) would be, for those, a lost reply:
// every transition sent again finds its own work.
package lua
