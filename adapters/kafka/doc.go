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
//   - it disables auto-commit and commits itself, synchronously, after every poll;
//   - it blocks rebalances while a poll is processed (kgo.BlockRebalanceOnPoll), so a
//     partition is never revoked while one of its records runs, and commits
//     synchronously on revocation what was settled but not yet committed;
//   - it owns kgo.OnPartitionsAssigned, OnPartitionsRevoked and OnPartitionsLost (give
//     yours to WithOnAssigned and friends: options of kgo set there are replaced);
//   - it fails construction without kgo.ConsumerGroup or topics, with
//     kgo.AutoCommitMarks, or with a dead-letter topic that is also consumed.
//
// # Keys
//
// By default a record's key is its Idempotency-Key header when present. Without the
// header, the key is derived from the record's coordinates (topic, partition,
// offset): that recognises the same record delivered again after a crash or a
// rebalance, but not an event its producer published twice (that lands at another
// offset). The record's Kafka key is not used by default: it names an entity (an
// order), not an operation, so using it would drop every event after the first.
// For end-to-end deduplication send the header, or take the key from the value with
// WithKeyFunc / WithValueKey.
//
// # What happens to a record
//
// Partitions are processed in parallel; the records of one partition strictly in
// order, each poll's records of a partition through consumer.ExecuteBatch (one claim
// round trip per partition batch). consumer.ActionFor decides:
//
//   - SUCCESS, DUPLICATE: settled; but a DUPLICATE of a key that failed for good is
//     dead-lettered again (its first copy may never have been confirmed).
//   - retryable ERROR: retried in place with exponential backoff and jitter; the
//     store counts the attempts and, at its max attempts, the record is dead-lettered.
//     Later records of the partition wait.
//   - permanent ERROR, CONFLICT, EXHAUSTED, undecodable, no usable key: produced to the
//     dead-letter topic (default <topic>.dlq) with headers saying why; settled only
//     once the broker acknowledged that produce.
//   - IN_PROGRESS: waited for (bounded, WithInProgressWait); the record then ends as
//     DUPLICATE, is taken over, or is fetched again at the next poll.
//
// After each poll the offset after the last contiguous settled record of each
// partition is committed. A record that could not be settled (store unreachable for
// longer than WithRetryLater, dead-letter produce failing, still in progress) stops
// its partition: its offset is fetched again at the next poll and nothing past it is
// committed.
//
// # Shutdown, revocation, loss
//
// When Run's context is cancelled the adapter stops polling, lets the records of the
// current poll finish for up to WithShutdownGrace, releases the claims of those it
// did not start, commits synchronously what is settled, and leaves the group. On
// revocation nothing is in flight (rebalances wait for the poll to finish) and
// settled offsets are committed synchronously. On loss (the member was fenced out)
// nothing is committed: another member owns the partitions, and the store's owner
// tokens reject this member's late completions (LEASE_LOST).
package kafka
