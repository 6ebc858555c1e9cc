// Package idemprom exports idemkit's executions as Prometheus metrics.
//
// Import it as "github.com/idemkit/idemkit/contrib/idemprom", a module of its own, so
// that only who imports it gets its dependencies.
//
// New returns a *Metrics: an observer to install on a store with
// consumer.WithObserver, and a prometheus.Collector to register on a registry.
// Every execution that uses the store reports to it: ExecuteIdempotently and
// ExecuteBatch (source "execute"), a consumer.Pipeline (its WithSource name), the
// broker adapters (which also report retries, dead letters, commits and
// acknowledgements), the HTTP middleware and replay.
//
//	m, err := idemprom.New()
//	if err != nil { ... }
//	prometheus.MustRegister(m)
//	store, err := redisstore.NewStore(rdb, consumer.WithScope("payments"), consumer.WithObserver(m))
//
// It is a separate Go module so that the core module does not depend on the
// Prometheus client. It is built on github.com/prometheus/client_golang, the
// Prometheus project's own client: its registries, native histograms and
// exposition are what every Prometheus server and scraper expects.
//
// # Metrics
//
// Names below use the default namespace "idemkit" (WithNamespace changes it).
// Outcome and store metrics:
//
//	idemkit_outcomes_total{scope,source,outcome,action,kind}   counter: messages by outcome
//	idemkit_handler_duration_seconds{scope,kind}              histogram: handler runs
//	idemkit_handlers_running{scope}                           gauge: handlers running now
//	idemkit_store_latency_seconds{scope,op}                   histogram: store calls (op claim, settle, renew)
//	idemkit_store_messages_total{scope,op}                    counter: messages those calls carried
//	idemkit_claim_answers_total{scope,answer}                 counter: what claims found
//	idemkit_claim_takeovers_total{scope}                      counter: claims that took a crashed or stalled owner's record over
//	idemkit_leases_lost_total{scope}                          counter: attempts stopped because their lease was lost
//
// Adapter metrics (reported by the Kafka and RabbitMQ adapters):
//
//	idemkit_retries_total{source,scope,kind}                  counter: retries scheduled
//	idemkit_dead_letters_total{source,scope,kind}             counter: dead-letter copies the broker confirmed
//	idemkit_dead_letters_bodyless_total{source,scope}         counter: of those, copies sent without the body
//	idemkit_commits_total{source,topic}                       counter: offsets committed
//	idemkit_kafka_commit_lag{topic,partition}                 gauge: high watermark minus the committed offset
//	idemkit_acks_total{source,queue}                          counter: acknowledgements sent
//	idemkit_acked_messages_total{source,queue}                counter: deliveries they settled
//
// Record metrics, read at scrape time from a StateCounter (WithStateCounter):
//
//	idemkit_records{scope,state}                              gauge: records by state
//	idemkit_records_sampled{scope}                            gauge: 1 when the counts are those of a sample
//	idemkit_record_count_seconds{scope}                       gauge: how long the last count took
//	idemkit_record_count_errors_total{scope}                  counter: counts that failed
//
// # Labels
//
// Label values are idemkit's one vocabulary, spelled the same in every metric here,
// in the OpenTelemetry plugin (contrib/idemotel) and in its spans:
//
//   - scope: the store's scope (consumer.WithScope). WithScopeLabel(false) drops it
//     from every metric.
//   - source: who ran the execution: execute (ExecuteIdempotently, ExecuteBatch),
//     pipeline (or a Pipeline's WithSource name), kafka, amqp, http, replay.
//   - outcome: success, duplicate, in_progress, error.
//   - action: what the entry point does with the message (consumer.ActionFor):
//     settle, wait, retry, dead_letter, or reject where the source has no
//     dead-letter destination (http answers a final error such as 422; replay
//     leaves the message failed).
//   - kind: the error's kind (consumer.ErrorKind): permanent, conflict, exhausted,
//     lease_lost, store_unavailable, corrupt, undecodable, invalid_key, no_key,
//     not_run, abandoned, interrupted, panic, config, handler; none without an error; unknown
//     for anything else. The dead-letter counter's kinds are the upper-case kinds
//     of the copies' headers (PERMANENT, NO_KEY, ...) in lower case.
//     WithKindLabel(false) drops it from every metric.
//   - op: claim, settle or renew.
//   - answer: claimed, duplicate, in_progress, conflict, error. The in_progress
//     count is how often a claim found another owner at work; an execution that
//     still finds it after waiting ends with outcome in_progress. A claim counted
//     by idemkit_claim_takeovers_total is also counted as claimed.
//   - topic, partition, queue: the broker's names. The commit-lag gauge keeps at
//     most WithLagSeries partitions (the least recently committed is dropped first)
//     and drops a partition not committed for WithLagExpiry (it moved to another
//     consumer).
//   - state: the record states the StateCounter reports (started, completed,
//     failed, retry).
//
// A handler that finds its effect already applied by an attempt that crashed
// before recording it (consumer.ErrAlreadyApplied, store/postgres's InTx) is not
// a failure: its duration is observed with kind none, and its outcome is
// duplicate.
//
// Idempotency keys are never labels: every label has a small, bounded set of
// values.
//
// # Cost
//
// Hooks run on the execution's path. Each resolves its labelled series once and
// keeps it (a lock-free lookup afterwards), so an event costs an atomic add or a
// histogram observation. The record counts cost whatever the StateCounter costs;
// they are taken at most once per WithRecordInterval whatever the scrape rate, and
// each count is bounded by WithRecordTimeout.
package idemprom
