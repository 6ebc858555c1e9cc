// Package replay drives old messages through a handler again, idempotently: a
// range of a Kafka topic (by offsets or times, per partition), the messages of a
// RabbitMQ queue, a JSON Lines file, or any Source. Messages whose keys are completed are DUPLICATEs and do not run;
// the others run once, however often the replay is interrupted and resumed.
//
// # Plan, then execute
//
// Plan reads the source and the records of its keys, read-only and in batches
// (one round trip of plain reads per batch on Redis), and counts what an
// execution would do: NEW (no record: the handler runs), RETRY (a retryable
// failure, or a claim whose lease ran out: runs again), DUPLICATE, FAILED,
// IN_PROGRESS, CONFLICT (the record's fingerprint differs), CORRUPT, INVALID (no
// usable key) and QUARANTINE (the loop guard). It names the first 20 INVALID
// messages, where each is (a JSONL line number, a Kafka partition and offset) and
// why (PlanReport.Invalid). The report marshals to JSON.
//
// Execute runs the messages on idemkit's execution engine, a consumer.Pipeline, as
// a stream: it reads the source a batch at a time (WithBatchSize) ahead of the
// handlers, keeps up to a batch of messages handed to the engine and not yet
// settled, which claims and completes them in calls that carry whatever is ready,
// and starts each handler as its claim returns (WithConcurrency handlers at once),
// optionally at a rate (WithRate). Two messages of one key never run at once: the
// second waits for the first to settle, and then usually finds it DUPLICATE. A
// message another owner holds is looked at again while the store's
// consumer.WithWaitInProgress allows, as any execution does. The engine's events
// reach the store's observers with the source "replay".
//
// Results are counted in source order. Execute reports progress after each batch
// (WithProgress) and saves a checkpoint (WithCheckpoint): per partition, the offset
// of the first message that did not settle. It is saved only after the effects of
// every message before it were recorded, at most once a second and at the end, so a
// resumed replay never skips unsettled work, and what it repeats the store answers
// as DUPLICATE. A message with a retryable error, or in progress elsewhere, holds
// its partition's checkpoint where it is (the rest of the partition still runs).
// Cancelling the context stops the replay after the running handlers: the messages
// whose handlers have not started are released unrun, a handler that returns an
// error once the replay is stopping (its context is cancelled too) has its claim
// given back without counting an attempt, and the checkpoint is saved. A store that
// does not answer stops it too: once a message's store call failed (an error
// matching consumer.ErrStoreUnavailable) Execute takes no further batch, since
// every batch after it would only meet the same outage, lets the batches it took run
// out and returns that error; run it again once the store answers. The
// report counts every verdict and names the first 20 messages that did not end RAN
// or DUPLICATE, with why (Report.Errors). A store with consumer.WithLock, which the
// Pipeline does not take, runs its messages one at a time, in source order, each
// through consumer.ExecuteIdempotently under its lock.
//
// # Scope
//
// Execute, RedriveKafka and RedriveRabbitMQ run handlers and change records for a
// stream of messages that several services may handle, so, like the broker
// adapters, they refuse a store left on consumer.DefaultScope, with the error of
// consumer.Settings.CheckScope (it matches consumer.ErrDefaultScope and ErrConfig
// and says what to change): give the store the service's consumer.WithScope. They
// refuse it before reading the source, dry runs of a redrive included. Plan only
// reads, so it works on any scope, and its report says which (PlanReport.Scope).
//
// # Traps it guards against
//
//   - Re-encoded payloads: idemkit fingerprints the bytes the live consumer passed
//     it; an archive that re-encoded them (pretty-printed JSON, say) conflicts on
//     every key. WithCanonical gives the bytes to fingerprint (CompactJSON undoes
//     whitespace changes); the handler still gets the message as stored.
//   - Messages older than the retention: their records may have expired, and
//     they would run again. Plan counts them (BeyondRetention, and of them
//     BeyondRetentionNew with no record); Execute stops before the first batch
//     holding one without a record, with ErrBeyondRetention, unless
//     WithAcceptBeyondRetention(true). Only messages whose source knows their time
//     (Kafka records, JSONL lines with "time") can be checked.
//   - Loops: a message whose idemkit-replay-count header reached WithMaxReplays
//     (default 5) is quarantined (WithQuarantine), not run.
//
// # Dead-letter redrive
//
// RedriveKafka reads a Kafka dead-letter topic (a KafkaSource over it) and
// republishes each selected copy (RedriveFilter: kinds, keys, times) to the topic it
// came from, with idemkit-replay-count raised by one. A key completed since is
// skipped; a key that failed for good is made to run once more first when Rerun is
// asked (only while still failed, at the fence the store holds, so a second
// redrive never reruns what the first completed). ReadDeadLetter is the one place
// that reads the adapter's dead-letter headers.
//
// RedriveRabbitMQ does the same for a RabbitMQ dead-letter queue (a RabbitSource
// over it): each selected copy is published straight to the work queue it came
// from (the default exchange, so a fan-out exchange does not copy it to its other
// queues again), mandatory and with publisher confirms, and acked off the
// dead-letter queue only once the broker confirmed it. What is not redriven stays
// in the dead-letter queue. ReadRabbitDeadLetter reads the worker's headers.
//
// # Queues
//
// A RabbitMQ queue has no offsets to come back to: reading takes messages off it.
// A RabbitSource reads the messages the queue holds when it is opened, on a
// channel of its own with manual acks. Plan acks nothing: closing the source
// returns every message to the queue (marked redelivered; a quorum queue may
// count the return as a delivery). Execute acks a message once its effect is
// recorded (RAN, DUPLICATE) and leaves every other one (FAILED, CONFLICT,
// QUARANTINE, IN_PROGRESS, a retryable ERROR) in the queue; the queue is the
// checkpoint, so WithCheckpoint is refused with it. Keys come from the MessageId
// property by default, as the RabbitMQ worker reads them (RabbitKeyHeader,
// RabbitKeyFunc for others). By default the source holds every message it read
// unacked (a plan needs that); RabbitPrefetch bounds it for executions over
// queues too large for memory.
//
// The Kafka source uses franz-go with the caller's client options (brokers, TLS,
// SASL) and reads keys from the Idempotency-Key header by default, as the Kafka
// adapter does (KeyHeader, KeyFunc for others).
package replay
