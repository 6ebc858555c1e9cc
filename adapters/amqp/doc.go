// Package amqp runs RabbitMQ workers (amqp091-go) whose handler has exactly-once
// side effects per idempotency key, across redeliveries, duplicate publishes, worker
// crashes, store outages and connection loss.
//
// # Topology
//
// Topology.Declare declares, idempotently, the work queue, one delayed-retry queue
// per retry delay (each with a message TTL that dead-letters back to the work queue
// through the default exchange) and a dead-letter queue. Queues are classic unless
// Topology.Quorum is set. Quorum is recommended: quorum queues dead-letter at least
// once, and the quorum work queue dead-letters to the dead-letter queue a message
// past the broker's delivery limit (20 by default on RabbitMQ 4) instead of
// dropping it. Classic queues dead-letter at most once: a message moving from a
// retry queue back to the work queue is lost if the broker fails between the two
// (the worker logs this at start). A queue that exists with other arguments gives a
// *TopologyConflictError naming the argument. Tiered retry queues are used instead
// of per-message expiration because a queue expires only its head: one long delay
// would hold back shorter ones.
//
// # The flow
//
// Deliveries are not processed batch by batch. Each delivery joins the shared
// execution engine (consumer.Pipeline) as it arrives, under the prefetch window
// (WithPrefetch, default 256): claims and completions are batched from whatever is
// ready, a handler starts as soon as its claim returns (WithConcurrency handlers at
// once, default the prefetch), and each delivery is acked as soon as it is settled:
// one multiple-ack for the settled tags that extend the contiguous settled prefix;
// a tag settled above the prefix waits up to 5ms for the prefix to reach it (and
// at most an eighth of the prefetch waits), then is acked alone, so a slow
// delivery never holds back the acks of others for longer. AMQP 0-9-1 has no range
// ack: behind a delivery that stays unacked, each later one needs an ack of its
// own. Those go in bursts (past the cap, down to half of it; once the oldest has
// waited 5ms, with it each that has waited 2.5ms), and a burst goes to the socket
// in one write: a stalled delivery costs the others a frame apiece, not a write
// apiece (and the broker reads the burst at once).
// consumer.ActionFor decides:
//
//   - SUCCESS, DUPLICATE: ack. (A DUPLICATE of a key that failed for good is
//     dead-lettered again: its first copy may never have been confirmed.)
//   - a handler's retryable ERROR: published to a delayed-retry queue with the
//     adapter's attempt header (x-idemkit-attempts; x-death belongs to the broker)
//     raised by one, then acked; after WithMaxAttempts deliveries, dead-lettered
//     (kind EXHAUSTED). Never an immediate requeue.
//   - IN_PROGRESS, a store outage, a handler that never ran: not an attempt. The
//     delivery cycles through the longest retry delay (IN_PROGRESS: the shortest not
//     under the other owner's lease) with its attempt count unchanged, for as long as
//     it takes: an outage dead-letters nothing.
//   - permanent ERROR, CONFLICT, EXHAUSTED, an undecodable body, no key: published
//     to the dead-letter queue, then acked. The copy carries the message and
//     x-idemkit-key, -attempts, -outcome, -kind (PERMANENT, CONFLICT, EXHAUSTED,
//     UNDECODABLE, NO_KEY, ...), -reason (the error cut to MaxErrorHeader, 4 KiB: a
//     header table must fit in one frame) and the original queue and routing. A copy
//     whose headers would pass half of the default frame (64 KiB), or that the
//     broker refuses for its size, goes with the idemkit headers only, without the
//     body (x-idemkit-body-less).
//
// Every republish waits for the broker's publisher confirm before the original is
// acked. If a republish or an ack fails, the session ends: the unacked deliveries
// return to the queue and the worker reconnects with backoff. A network partition
// gives no error: the worker takes a connection that hears nothing for three
// heartbeat intervals (WithHeartbeat, 10s by default) as lost, likewise. Handler
// panics are recovered, logged with their stack and retried as failures.
//
// A running handler's claim is renewed while it runs, but the broker closes a
// channel whose delivery stays unacked past its consumer_timeout (30 minutes by
// default): the worker warns at start when the store's lease is not below
// WithConsumerTimeout.
//
// # Keys
//
// The key is the message's MessageId by default, or a header (WithKeyHeader), or a
// function (WithKeyFunc, WithValueKey). A delivery without a key is dead-lettered
// with that reason: it is never run unguarded.
//
// # Ordering
//
// WithOrdering(ByKeyHeader(name)), ByKeyFunc or ByValueKey run the deliveries of
// one ordering key (an account, an order) one at a time, in the order the worker
// received them, and different keys at once; Unordered (the default) runs
// deliveries as they come. The lanes are those of the Kafka adapter's key
// ordering, and acks are unchanged: each delivery is acked once it settles, a
// multiple-ack covering only the channel's contiguous settled prefix, so a key that
// stalls holds back only its own later deliveries. An ordered delivery to be
// retried (a handler failure, another owner's live claim, a store outage) waits in
// place, holding its key, instead of going through a delayed-retry queue, which
// would let its successors overtake it; at WithMaxAttempts it is dead-lettered and
// its key goes on. It stays unacked meanwhile, in its prefetch slot.
//
// The lanes are the worker's, not a session's. When a channel is lost, every
// unacked delivery returns to the queue and is redelivered in queue order; a
// handler of the lost session that is still running keeps its lane, and the
// redelivered copies of its key wait behind it, never running ahead of it or beside
// it. Deliveries of the lost session still waiting are dropped from their lanes
// unrun. The order is the order this worker receives: several workers on one queue
// each order only their own share (use a single-active-consumer queue or one queue
// per shard of keys).
//
// # Scope
//
// The store must have a scope of its own (consumer.WithScope, the service's
// name): NewWorker refuses one left on the default scope with an error matching
// ErrConfig and consumer.ErrDefaultScope, since two services whose queues are bound
// to one fanout exchange would share its records, and the second would take every
// message the first handled for a DUPLICATE and never run it.
//
// # Connection loss and shutdown
//
// When the connection or a channel closes, the worker reconnects with exponential
// backoff and full jitter, declares its consumer again, and never acks a delivery
// tag of the dead channel. The deliveries that were unacked return to the queue;
// their keys come back as DUPLICATE (done) or IN_PROGRESS (still running
// elsewhere).
//
// When Run's context is cancelled the worker cancels its consumer and lets what it
// took settle for up to WithShutdownGrace: the handlers finish, their records are
// settled, and every dead-letter and retry copy is confirmed by the broker and its
// original acked before Run returns. When the grace runs out, the handlers still
// running see their contexts cancelled and their claims are released, and a copy
// not yet sent is not sent: its original returns to the queue whole. A copy
// already sent is still waited for (its confirm is bounded by 30s) and its
// original acked, so that no message is both copied and put back.
//
// # Refusals and readiness
//
// A refusal that reconnecting cannot cure ends Run with a *RefusedError that says
// what to fix: a wrong user name or password, a vhost that does not exist or that
// the user may not use (403 ACCESS_REFUSED, 530 NOT_ALLOWED, 402 INVALID_PATH at
// login), or permissions the user lacks on the worker's queues (403 on a channel).
// RabbitMQ drops a login with a wrong password without saying why, as a lost
// connection would, so Run ends only when the next dial is dropped too (a login
// that runs out of the dial's 5s is not taken for a refusal). A
// connection limit that is reached and a vhost that is restarting are waited out,
// and so is everything else: a broker that does not answer, a connection the
// broker closes (CONNECTION_FORCED), a reset, a missed heartbeat. Run ends with a
// *TopologyConflictError when a queue exists with other arguments.
//
// Worker.Check is for start-up: it dials the broker as Run would, declares the
// topology (or checks that its queues exist, under WithDeclare(false)), and
// reports a refusal, a conflict or a broker that does not answer, without
// consuming. Worker.Ready is for readiness probes: nil while Run consumes, and
// otherwise an error matching ErrNotConsuming that says why (not started,
// reconnecting after an error, refused, stopped). Neither checks the store: the
// Redis store has a Check of its own.
//
// # Observing
//
// The worker reports to the observers of its store (consumer.WithObserver), the
// one registry of idemkit's events; the queue and the delivery tag travel as the
// events' Origin. Every delivery's run is the engine's (consumer.HandlerHook,
// OutcomeHook: one outcome per delivery); the worker adds each copy to a
// delayed-retry queue once confirmed (RetryHook, the queue as Destination), each
// dead-letter copy the broker confirmed (DeadLetterHook, with the reason as Err,
// also for deliveries that could not run), each acknowledgement (AckHook), and
// each lost session, before it reconnects, and its return (PauseHook).
//
// # Trace context of the copies
//
// A retry copy carries the delivered message's headers and properties, plus
// x-idemkit-attempts and the original exchange and routing key; a dead-letter copy
// the same plus the headers listed above (a body-less one: the idemkit headers
// only). When a tracer is among the store's observers (consumer.TraceHook, such as
// contrib/idemotel's Tracer), it writes the trace context of the copy's delivery
// into the copy with its propagator, over the message's headers of the same names:
// the span of the delivery's last handler run when its handler ran, so that the
// next attempt's span links to the attempt before it and a dead letter points at
// the run that failed; the delivered message's own trace context when no handler
// ran (an undecodable delivery, one without a key, a key in progress elsewhere, a
// store outage, a DUPLICATE of a failed key). The idemkit headers are set after
// it, so a tracer never changes them. A trace header the tracer cannot read (not a
// string, or malformed) changes nothing else: the copy is made, with the header
// as it came unless the tracer writes one of its own. Without a tracer, the
// message's own trace headers travel with the copy as every other header does.
package amqp
