// Package kafka runs a franz-go consumer group whose handler has exactly-once side
// effects per idempotency key: duplicates, crashes, rebalances and zombie members
// cannot run an operation twice, and nothing is committed before it is done.
//
// # Wiring
//
// Keep your own kgo options (brokers, TLS, SASL, group, topics) and pass them to New
// with a store and a handler. The adapter adds what correctness needs and refuses
// what would break it:
//
//   - it disables auto-commit and commits itself: every WithCommitInterval (100ms),
//     the contiguous settled prefix of each partition, synchronously;
//   - it owns kgo.OnPartitionsAssigned, OnPartitionsRevoked and OnPartitionsLost (give
//     yours to WithOnAssigned and friends: options of kgo set there are replaced);
//   - it fails construction without kgo.ConsumerGroup or topics, with
//     kgo.AutoCommitMarks, with a dead-letter topic that is also consumed, or with a
//     store on the default scope (give each service consumer.WithScope, so that two
//     services on one topic keep records of their own);
//   - Run refuses to start while a dead-letter topic is missing (see below).
//
// # Dead-letter topics
//
// Every consumed topic needs its dead-letter topic (default <topic>.dlq) before any
// of its records is taken: a record that must be dead-lettered is settled only once
// the broker acknowledged its copy, so without the topic its partition would stop
// committing at the first poison record. Run therefore checks, before it polls,
// that the dead-letter topic of every named topic exists, and returns an error
// naming each missing one and the fix (a *DeadLetterTopicError; errors.Is
// ErrNoDeadLetterTopic) without taking a record. WithCreateDeadLetterTopics creates
// the missing ones instead (the consumer's principal needs CREATE on them); with
// kgo.AllowAutoTopicCreation in the client's options the check lets the broker
// create them, as a produce would. The checks are plain Metadata and CreateTopics
// requests through the consumer's own client, so the adapter needs no admin client.
//
// With kgo.ConsumeRegex the topics are not known at the start: a topic's
// dead-letter topic is checked (or created) when the topic's partitions are first
// assigned to the member, before any of its records is fetched. A topic whose
// dead-letter topic is missing, cannot be created or described, or would itself be
// matched by the patterns (it would be consumed too) is stopped: its fetches are
// paused, so none of its records runs and nothing of it is committed, an error is
// logged naming the dead-letter topic and the fix, and the store's observers are
// told (consumer.PauseHook's OnPause, with the *DeadLetterTopicError). The other
// topics go on. A stopped topic is checked again every 5 seconds and resumes
// (OnResume) once its dead-letter topic can be used. A dead-letter topic
// deleted while the consumer runs is not checked again: the partition of a record
// that needs it waits at that record, logging an error, until it exists.
//
// # Keys
//
// By default a record's idempotency key is its Idempotency-Key header when present.
// Without the header, the key is derived from the consumer group and the record's
// coordinates (topic, partition, offset): that recognises the same record delivered
// again after a crash or a rebalance, but not an event its producer published twice
// (that lands at another offset). The record's Kafka key is not the idempotency key
// by default: it names an entity (an order), not an operation, so using it would
// drop every event after the first. For end-to-end deduplication send the header,
// or take the key from the value with WithKeyFunc / WithValueKey.
//
// # The flow
//
// Records are not processed poll by poll. Every record taken from a poll joins the
// shared execution engine (consumer.Pipeline): claims and completions are batched
// from whatever is ready (one round trip for many records under load, none waited
// for when idle), a handler starts as soon as its claim returns, and each result is
// settled as it finishes. WithInFlight (1024) bounds the records in the engine,
// WithConcurrency (1024) the handlers running: both sized for handlers that wait on
// I/O for milliseconds; lower WithConcurrency for CPU-bound handlers, or to what a
// shared resource (a database pool) takes, and WithInFlight with it.
//
// Why 1024: a record holds its place in the window from its claim to its
// completion, two batched store round trips around its handler. On a busy host
// those round trips took about 12 ms per record together (measured with a 20 ms
// handler: 256 in flight settled 7,200-9,100 records/s, a 32 ms cycle), so a 2 ms
// handler with 256 in flight was held to about 256 / 14 ms = 18,000 records/s
// however fast the rest ran; 1024 lifts that bound to about 73,000, above the
// 40,000 records/s the adapter is meant to sustain with a 2 ms handler, and
// leaves the host's CPU as the limit (make bench-kafka, docs/performance.md). The
// price is up to 1024 handlers (goroutines) at once and as many claims held; the
// per-partition pause (WithPartitionInFlight) is unchanged.
//
// WithOrdering says which records may run at once: ByKey (the default) runs the
// records of one Kafka record key in offset order, one at a time, and different
// keys at once (as Confluent's parallel consumer does); ByPartition runs a
// partition strictly in order; Unordered runs records as they come. In every mode
// two records with the same idempotency key never run at once.
//
// consumer.ActionFor decides what a result means:
//
//   - SUCCESS, DUPLICATE: settled; but a DUPLICATE of a key that failed for good is
//     dead-lettered again (its first copy may never have been confirmed).
//   - retryable ERROR: run again after a backoff (WithBackoff) with jitter; the store
//     counts the attempts and, at its max attempts, the record is dead-lettered. A
//     store outage is waited out the same way but is not an attempt.
//   - IN_PROGRESS: looked at again when the other owner's lease may have ended.
//   - permanent ERROR, CONFLICT, EXHAUSTED, undecodable, no usable key: produced to the
//     dead-letter topic (default <topic>.dlq) and settled only once the broker
//     acknowledged it. The copy carries the record's key, value and headers plus
//     idemkit-original-topic/-partition/-offset, idemkit-key, idemkit-attempts,
//     idemkit-outcome, idemkit-kind (PERMANENT, CONFLICT, EXHAUSTED, UNDECODABLE,
//     NO_KEY, ...) and idemkit-error cut to MaxErrorHeader (4 KiB). When the broker
//     refuses the copy for its size, a body-less copy (headers only, with
//     idemkit-body-less: true) goes instead; other produce failures are tried again
//     with backoff.
//
// A record that waits (retrying, in progress elsewhere, its dead letter not yet
// acknowledged) holds back only its own lane (its key, or its partition in
// ByPartition) and its partition's commit point: other keys and other partitions go
// on. A partition with WithPartitionInFlight (1024) records taken and not settled is
// paused until half of them settled; the member goes on with the others. Handler
// panics are recovered, logged with their stack and retried as failures.
//
// # Revocation, loss, shutdown
//
// On revocation the revoked partitions take no more records; their records waiting
// to start are dropped, and those running get up to WithRevokeDrain (5s) to settle.
// Then their settled prefix is committed, including every record that settled
// during the drain (a handler that finished, a dead-letter copy the broker
// confirmed), and the rebalance goes on: a revocation holds the group up for at
// most WithRevokeDrain plus one commit. Records still running then have their
// contexts cancelled; their next owner runs them (if a handler already finished
// its effect, the store makes the next owner's delivery a DUPLICATE once the
// completion is written, or waits for the lease; a dead-letter copy still
// unconfirmed when the drain ends may exist twice, since the next owner produces
// it again). On loss (the member was fenced out) nothing of the lost partitions is
// committed again, not even what settles after the loss: another member owns them,
// and the store's owner tokens reject this member's late completions (LEASE_LOST).
// When Run's context is cancelled the adapter stops polling, lets what it took
// settle for up to WithShutdownGrace, commits what is settled, cancels what still
// runs, releases those claims and leaves the group (without a second drain: a
// record still waiting for its retry is left to the partition's next owner).
//
// # Observing
//
// The adapter reports to the observers of its store (consumer.WithObserver), the
// one registry of idemkit's events; the record's topic, partition and offset travel
// as the events' Origin. Every run of a record is the engine's (consumer.HandlerHook,
// OutcomeHook: its final outcome is the one whose Action is Ack, or its
// dead-letter copy); the adapter adds each retry in place (RetryHook), each
// dead-letter copy the broker confirmed (DeadLetterHook, with the reason as Err,
// also for records that could not run), each commit with the partition's lag and
// each failed commit (CommitHook; CommitEvent.Err), and each topic stopped or
// resumed over its dead-letter topic (PauseHook).
//
// # Trace context of the dead letters
//
// When a tracer is among the store's observers (consumer.TraceHook, such as
// contrib/idemotel's Tracer), it writes trace context into every dead-letter copy
// (a body-less one too) with its propagator, over the record's headers of the
// same names: the span of the record's last handler run when its handler ran (a
// permanent error, EXHAUSTED after its retries in place), so a dead letter points
// at the run that failed; the record's own trace context when no handler ran (an
// undecodable record, one without a usable key, a DUPLICATE of a failed key). A
// trace header the tracer cannot read (malformed, or bytes that are no text)
// changes nothing else: the copy is made, with the header as it came unless the
// tracer writes one of its own. A tracer whose Inject panics is logged at Error
// with its stack and writes nothing: the copy goes with its idemkit headers. A
// tracer never changes an idemkit header (a name it writes that is one is
// ignored). Without a tracer, the record's own trace headers travel with the copy as every other
// header does.
package kafka
