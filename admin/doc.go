// Package admin is idemkit's operator API: an Inspector that lists, inspects and
// counts idempotency records, and makes the three operator transitions, each one
// atomic change with the operator's name and reason recorded in the record.
//
// The idemkit command-line tool (cmd/idemkit) is built on it; services can embed it
// in their own admin endpoints.
//
// # Stores
//
// The Inspector works on any store with the methods of the Store interface
// declared here: redisstore.Store (one server, a Sentinel-managed primary, a
// Redis Cluster, whose every primary is scanned, or a Ring, whose every shard is),
// memory.Store, and the PostgreSQL store (store/postgres: NewStore and
// NewPartitionedStore). The stores implement the methods where the record layout
// is known; this package declares the small interface it needs, so another store
// gains the Inspector by adding the four methods.
//
// # Listing and counting
//
// List and Stats walk the records with bounded steps: on Redis, one SCAN ... COUNT
// n on one primary and one pipeline of plain GET and PTTL commands for the keys it
// returned, never KEYS and never a script, so the server serves other clients
// between the commands; on PostgreSQL, one statement that walks the (scope, key)
// index from the last key of the step before, in key order. A List page ends at Query.Limit records (default 100) or
// Query.MaxExamined keys examined, whichever comes first, and returns a cursor to
// continue from. Like SCAN, a complete listing returns every record that existed
// throughout it at least once and may return one twice; a record that enters the
// filter (by ageing past OlderThan, say) while a listing runs may be missed. Stats
// reads at most StatsQuery.MaxRecords records (default 1,000,000) and says when it
// stopped early (Stats.Sampled): SCAN visits keys in hash order, which has nothing
// to do with their state or age, so a sample's proportions hold for the whole.
//
// A record's age is how long it has been in its state: the time since its last
// change (its current claim, completion or failure), read from the record's
// updated time (whole seconds of the writing worker's clock) against the reader's.
//
// # Operator transitions
//
// Each takes a Change with the key, the actor (who) and the reason (why, required);
// the note "<op> by <actor>: <reason>" goes first in the record's operator notes
// (Record.Notes, newest first), which Inspect and List show. The record keeps its
// notes through every later transition (claims and takeovers, failures, releases,
// completions, a forget's fresh start) for as long as it lives: the newest 8, each
// at most 1,280 bytes (a note made here is at most 1,165, kept whole). The error
// history (Record.History) holds the attempts' errors only. Change.Fence, when set,
// makes the change conditional on the record still holding the fence the operator
// saw.
//
//   - Unstick ends a started claim whose owner is gone. The record becomes retry at
//     fence+1 and the abandoned attempt is not counted: the next delivery claims the
//     key at once (at fence+2) and runs it. If the owner was alive after all, it
//     learns at its next renewal (within a third of its lease) or settlement, which
//     answer LEASE_LOST; until then it may overlap the new attempt, so writes that
//     must not interleave check the fence. Only unstick a key whose owner you know
//     is gone; Record.LeaseLeft says how long the lease would have held it.
//   - Forget removes a record but keeps its fence: the record stays, in state
//     forgotten, holding only the fence, its error history and its notes, for at
//     least the store's retention. The next claim starts afresh: attempt 1, no stored
//     fingerprint (a re-encoded payload is accepted), fence one above the last.
//   - Rerun lets a completed or failed key run once more: the record becomes retry
//     with no attempt counted and the next delivery claims it, with the whole
//     attempt budget (WithMaxAttempts of the worker that claims it), at fence+1. A
//     completed record's stored result is dropped; the fingerprint stays, so the
//     same message runs and a different payload under the key is still a conflict.
//     A rerun that succeeds is completed again, and later duplicates are
//     recognised as before.
//
// # Bulk actions
//
// Preview and Execute make one transition on every record a Filter selects
// (scope, states, age, owner or key prefix, a lease that ran out, a failed
// record's error kind or text): the 36 stuck keys of one dead replica, say, with
// Filter{OwnerPrefix: "3fa8c1d2e4b5a6f7-", LeaseRanOut: true}. Preview walks the
// listing page by page, changing nothing, and returns a Plan: the exact count, a
// sample, and each match's fence and state as seen. Execute refuses a plan that
// counted more than Bulk.Max records (default 1,000; ErrTooMany), and otherwise
// changes each record with the fence it was seen at as the precondition, after
// reading it again: a record that moved on in between (claimed, taken over,
// completed, renewed, changed by another operator) is left alone and reported as
// moved. Each change records the actor and reason as a single change does. The
// Report counts what was applied, moved, refused in its state, gone, and not
// tried (Execute stops when its context ends).
package admin
