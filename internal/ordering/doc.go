// Package ordering keeps the two orders the broker adapters need on top of
// consumer.Pipeline, which claims, runs and settles messages in no order of its
// own: the order messages run in, and the order their positions are committed in.
//
//   - Sequencer keeps the messages of one lane in order: one at a time per lane,
//     lanes side by side. A lane is what the adapter says must stay ordered: a Kafka
//     partition (partition mode), a record key (key mode), nothing (unordered:
//     every message its own lane). Lanes is the same without a lock, with lanes
//     named by any comparable value, for a caller that holds a lock of its own.
//   - Tracker follows a stream of positions (Kafka offsets, AMQP delivery tags) and
//     says how far the settled ones form an unbroken prefix: what may be committed
//     or acknowledged with one multiple-ack, never past a message still in flight.
//
// None does I/O; Sequencer and Tracker are safe for concurrent use.
package ordering
