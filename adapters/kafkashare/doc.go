// Package kafkashare runs the members of a Kafka share group (KIP-932, "queues for
// Kafka": many members on one partition, each record acquired for a lock duration
// and acknowledged one by one) whose handler has exactly-once side effects per
// idempotency key. It maps every idemkit outcome onto a share acknowledgement:
// ACCEPT, RELEASE, REJECT, or RENEW while a record is held.
//
// # Why a package of its own
//
// A share group is not a consumer group with another option. The broker owns the
// assignment and the offsets: there is no partition to drain on revocation, no
// contiguous prefix to commit, no key order to keep. What there is instead: a
// per-record lock with a deadline, a per-record delivery count that archives the
// record at its limit, and a client rule that every record of a poll is accepted
// on the next poll unless acknowledged before. The classic adapter
// (adapters/kafka) is built around commit points and ordering lanes; mixing the
// two loops in one type would give every option a "classic only" or "share only"
// footnote. The two adapters share the engine (consumer.Pipeline), the hook
// registry and the dead-letter copy (the same headers, built in one place), and
// keep their own loops.
//
// # Wiring
//
// Pass your kgo options (brokers, TLS, SASL, kgo.ShareGroup, kgo.ConsumeTopics) to
// New with a store and a handler. The adapter sets kgo.FetchMaxWait to 250ms
// unless you set it (a fetch that finds every record acquired by other members
// waits that long), and adds kgo.ShareMaxRecords and
// kgo.ShareMaxRecordsStrict (WithMaxPollRecords, 500) and kgo.ShareAckCallback; it
// refuses options without kgo.ShareGroup or topics, kgo.ConsumeRegex, a dead-letter
// topic that is also consumed, and a store on the default scope. Run refuses to
// start while a dead-letter topic (default <topic>.dlq) is missing. A new share
// group starts at the latest offset: set the group config share.auto.offset.reset
// to earliest (SetGroupConfigs) to read what is already in the topics.
//
// # Outcomes and acknowledgements
//
// consumer.ActionFor decides what a result means; the adapter maps it so:
//
//	outcome                                   share action
//	----------------------------------------  ---------------------------------------------
//	SUCCESS; DUPLICATE of a completed key      ACCEPT
//	permanent error, EXHAUSTED, CONFLICT,      produce idemkit's dead-letter copy (confirmed
//	undecodable, no usable key, DUPLICATE of   by the broker), then ACCEPT; with
//	a key that failed for good                 WithBrokerDeadLetter: REJECT, and no copy
//	                                           of idemkit's (the broker archives it)
//	IN_PROGRESS (another owner's live claim)   hold, renewing the lock (RENEW), and look
//	                                           again when the claim may have ended; RELEASE
//	                                           after WithBusyHold (1 minute). Within the
//	                                           hold a busy key burns no delivery count
//	retryable handler error                    hold, renewed, for the backoff (WithBackoff);
//	                                           then RELEASE: the broker redelivers it (the
//	                                           store counts the attempt). On the last
//	                                           delivery (WithDeliveryLimit) the record is
//	                                           dead-lettered (DELIVERY_LIMIT), then ACCEPTed:
//	                                           the broker would archive it uncopied
//	store outage                               hold, renewed, and try again in place; not an
//	                                           attempt. RELEASE only when the lock cannot be
//	                                           renewed, before it runs out
//	interrupted (lock expiring, shutdown,      RELEASE; not an attempt
//	lease lost)
//
// A dead-letter copy carries the record's key, value and headers plus the same
// headers as the classic adapter's: idemkit-original-topic/-partition/-offset,
// idemkit-key, idemkit-attempts, idemkit-outcome, idemkit-kind and idemkit-error;
// a body-less copy (idemkit-body-less: true) goes when the broker refuses the full
// one for its size. Dead-lettering is at least once (a copy confirmed after the
// record's lock ran out is made again on its redelivery); copies carry the key,
// so their readers can collapse repeats.
//
// # What is archived without a copy
//
// The guarantee is about the adapter's own acknowledgements, not every archive:
// a record is never accepted on the dead-letter path before its copy is
// confirmed, and a retryable failure on the record's last delivery is
// dead-lettered (DELIVERY_LIMIT) rather than released, so no handler failure
// leaves the broker to archive a record uncopied (with WithBrokerDeadLetter the
// broker's own dead-lettering takes over). A RELEASE for another reason on the
// last delivery still makes the broker archive the record, without a copy: a
// busy key released after WithBusyHold, an interrupted run (lock about to run
// out, lease lost, shutdown), a record held through a store outage whose lock
// renewal fails, and a copy whose produce keeps failing until the lock runs
// out; so does a lock that runs out while the member is paused or cut off. The
// adapter does not copy those, by decision: none is a failure of the record (a
// busy key's owner may yet complete it; an interrupted or stalled run is not an
// attempt), so a copy would put work that may still succeed in the dead-letter
// topic; and a copy that cannot be produced before the lock runs out cannot be
// waited for. Every such record is visible: the adapter warns and reports
// DeliveryLimitHook on its last two deliveries, and ShareActionHook reports the
// RELEASE with its delivery count (equal to WithDeliveryLimit when the broker
// archives it). Keep the store's max attempts below the limit, and WithBusyHold
// times the limit above the longest a key stays busy (a crashed owner's lease),
// so that only faults archive a record uncopied.
//
// # Deadlines and renewals
//
// A handler runs until the earlier of its idemkit lease deadline (the engine's
// lease keeper) and its record's acquisition deadline less WithAcquisitionMargin
// (2s, at most a quarter of the lock): then its context is cancelled, the attempt
// is not counted and the record is released before the broker gives it to another
// member. kgo computes the acquisition deadline when it decodes the broker's
// answer, from a lock the broker started before it sent the records, so the
// margin covers that and the acknowledgement's trip. While any record of a poll is
// held, the adapter renews every held record each third of the lock (RENEW, Kafka
// 4.2+) and moves the records' deadlines only once the broker confirmed the
// renewal (Client.FlushAcks returned, and ShareAckCallback reported no error for
// the partition since the renewal was sent). Renewal is best effort: a leader move
// or a dropped connection loses the hold, and a broker without RENEW refuses it;
// the records are then released before their original deadline, or the broker
// redelivers them, and the store makes the redelivery a DUPLICATE or waits for
// the claim.
//
// # The poll rule, in-flight and concurrency
//
// kgo accepts every record of a poll that was not acknowledged when the client
// polls again, and a RENEW does not carry over: accepting a record whose effect
// never ran would lose it. So each member client gives every record of a poll its
// terminal acknowledgement before it polls again. In flight: at most
// WithMaxPollRecords records per client (kgo.ShareMaxRecordsStrict makes that a
// hard limit, and turns off pre-fetching), WithClients (1) clients per Consumer,
// so WithClients x WithMaxPollRecords records in all. Handlers: WithConcurrency
// (256) at once over all clients, on one consumer.Pipeline. A poll is as slow as
// its slowest record: a slow or held record stalls only its own client's next
// poll, and more clients (each a member of the group) keep the others going.
//
// # Delivery counts
//
// A handler reads its record's delivery count with DeliveryCount(ctx). Records
// delivered for the last or next-to-last time (WithDeliveryLimit, 5: set it to
// the group's share.delivery.count.limit) are logged as a warning and reported to
// DeliveryLimitHook. Keep the store's max attempts below the delivery limit, so a
// failing record exhausts (and is dead-lettered) before the broker archives it.
//
// # Observing
//
// The adapter reports to the observers of its store (consumer.WithObserver), the
// one registry of idemkit's events, with the record's topic, partition and offset
// as the events' Origin and Source "kafka-share": every execution through the
// engine (consumer.HandlerHook, OutcomeHook), each retry (RetryHook), each
// confirmed dead-letter copy (DeadLetterHook), and its own hooks: every
// acknowledgement with the record's delivery count (ShareActionHook), the broker's
// answer to the acknowledgements, refusals included (ShareAckHook, from
// kgo.ShareAckCallback), and records near their delivery limit
// (DeliveryLimitHook).
//
// # Shutdown
//
// When Run's context ends each client stops polling; records waiting (busy,
// backing off) are released at once, running ones may settle for
// WithShutdownGrace (10s) before their handlers are cancelled and the records
// released; the acknowledgements are flushed and the clients closed (kgo releases
// anything still unacknowledged and leaves the group).
package kafkashare
