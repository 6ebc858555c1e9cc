// Package amqp runs RabbitMQ workers (amqp091-go) whose handler has exactly-once
// side effects per idempotency key, across redeliveries, duplicate publishes, worker
// crashes and connection loss.
//
// # Topology
//
// Topology.Declare declares, idempotently, the work queue, one delayed-retry queue
// per retry delay (each with a message TTL that dead-letters back to the work queue
// through the default exchange) and a dead-letter queue. Queues are classic unless
// Topology.Quorum is set; quorum retry queues dead-letter at least once. A queue
// that exists with other arguments gives a *TopologyConflictError naming the
// argument. Tiered retry queues are used instead of per-message expiration because
// a queue expires only its head: one long delay would hold back shorter ones.
//
// # What happens to a delivery
//
// The worker takes what the broker has delivered (up to the prefetch count) as one
// batch through consumer.ExecuteBatch, with up to WithConcurrency handlers at once,
// and then, per delivery, through consumer.ActionFor:
//
//   - SUCCESS, DUPLICATE: ack. (A DUPLICATE of a key that failed for good is
//     dead-lettered again: its first copy may never have been confirmed.)
//   - retryable ERROR, IN_PROGRESS: published to a delayed-retry queue with the
//     adapter's attempt header (x-idemkit-attempts; x-death belongs to the broker)
//     raised by one, then acked. Never an immediate requeue.
//   - permanent ERROR, CONFLICT, EXHAUSTED, an undecodable body, no key, or
//     WithMaxAttempts deliveries reached: published to the dead-letter queue with
//     headers giving the reason, the attempts and the original routing, then acked.
//
// Every republish waits for the broker's publisher confirm before the original is
// acked. If a republish fails, the session ends: the unacked deliveries return to
// the queue and the worker reconnects with backoff.
//
// # Keys
//
// The key is the message's MessageId by default, or a header (WithKeyHeader), or a
// function (WithKeyFunc, WithValueKey). A delivery without a key is dead-lettered
// with that reason: it is never run unguarded.
//
// # Connection loss and shutdown
//
// When the connection or a channel closes, the worker reconnects with exponential
// backoff and full jitter, declares its consumer again, and never acks a delivery
// tag of the dead channel (acks go through the delivery's own channel, which
// refuses them). The deliveries that were unacked return to the queue; their keys
// come back as DUPLICATE (done) or IN_PROGRESS (still running elsewhere).
//
// When Run's context is cancelled the worker cancels its consumer, lets the current
// batch finish for up to WithShutdownGrace, returns the deliveries it did not start
// to the queue (nack with requeue; their claims are released), and closes.
package amqp
