// Package idemotel traces and measures idemkit's executions with OpenTelemetry.
//
// Import it as "github.com/idemkit/idemkit/contrib/idemotel", a module of its own, so
// that only who imports it gets its dependencies.
//
// NewTracer returns a *Tracer and NewMeter a *Meter: observers to install on a
// store with consumer.WithObserver. Every execution that uses the store reports to
// them: ExecuteIdempotently and ExecuteBatch, a consumer.Pipeline, the broker
// adapters, the HTTP middleware and replay.
//
//	tr, err := idemotel.NewTracer()                 // the global TracerProvider
//	mt, err := idemotel.NewMeter()                  // the global MeterProvider
//	store, err := redisstore.NewStore(rdb, consumer.WithScope("payments"), consumer.WithObserver(tr, mt))
//
// It is a separate Go module so that the core module does not depend on
// OpenTelemetry. It is built on go.opentelemetry.io/otel, the project's own API:
// whatever SDK, exporter and sampler the application configures receive the spans
// and measurements.
//
// # Spans
//
// One span per execution, duplicates included:
//
//   - An execution whose handler runs gets a span of kind consumer around the
//     handler: started before the handler with the handler's context (so the
//     handler's own spans are its children) and ended at the time the handler
//     returned. The execution's outcome is added when it is known, after the
//     settlement, before the span is ended.
//   - An execution that runs no handler (a duplicate, a key in progress elsewhere,
//     a payload conflict, a store error before the claim) gets a span covering its
//     claim and outcome, ended at once. The outcome event carries the message's
//     headers (consumer.OutcomeEvent.Carrier), so this span is linked to (or, with
//     WithProducerAsParent, child of) the producer's span as a handler's is.
//
// The span is named "process <destination>" when WithDestination names one, else
// "process", as the messaging semantic conventions name processing spans.
// Attributes (semantic conventions v1.43.0 where they have a name for the thing):
//
//	messaging.operation.type        "process"
//	messaging.operation.name        "process"
//	messaging.system                WithSystem (kafka, rabbitmq, ...), when set
//	messaging.destination.name      WithDestination, when set
//	(any)                           WithCarrierAttributes, from the message's headers
//	idemkit.scope                   the store's scope
//	idemkit.key                     the idempotency key (WithKeyAttribute(false) leaves it out)
//	idemkit.attempt                 the attempt number (1 for the first)
//	idemkit.fence                   the claim's fence
//	idemkit.source                  who ran the execution: execute, pipeline, kafka, amqp, http, replay
//	idemkit.outcome                 success, duplicate, in_progress or error
//	idemkit.action                  ack, wait, retry, dead_letter or reject
//	error.type                      the error's kind (consumer.KindLabel), when there is an error
//
// These values are those of the metrics (see Labels below). A span whose outcome
// is error has status Error with the error's kind as its description (so does a
// handler span ended before its outcome was known, when the handler returned an
// error). The error's text is not recorded: it may carry payload data. A handler
// that finds its effect already applied by an attempt that crashed before
// recording it (consumer.ErrAlreadyApplied, store/postgres's InTx) did not fail:
// its span gets the outcome duplicate and no error.
//
// Attributes are added to a handler's span only once it is known to record: a
// sampler sees the span's kind, name and links, and an unsampled execution costs
// no attribute at all.
//
// # The producer's trace
//
// Adapters put the delivered message's headers in the handler's context
// (consumer.CarrierFromContext reads them). The tracer extracts the producer's trace context
// from them with the propagator (default W3C trace context and baggage) and adds
// it to the span as a link: a consumer's work is its own trace, linked to the
// trace that produced the message, so one slow consumer does not stretch the
// producer's trace and a redelivered message does not add spans to a finished
// trace. WithProducerAsParent(true) makes it the span's parent instead. The
// producer's baggage, if any, is put in the handler's context.
//
// Inject (consumer.TraceHook: adapters call it for the copies they produce: the
// dead-letter copies, and the RabbitMQ worker's delayed-retry copies) writes the
// trace context of the given context, that of the execution's span when called
// with the handler's context, into the copy's headers with the same propagator;
// called with a context without a span, it writes the delivered message's own
// trace context, if its headers had one. The RabbitMQ worker calls it with the
// context of the delivery's last handler run, so a retried delivery's span links to
// the attempt before it and a dead letter carries the run that failed; the Kafka
// adapters call it with the context of the record's last handler run for its dead
// letter. Without a handler run (an undecodable message, one without a key, a key
// in progress elsewhere, a duplicate of a failed key), they call it with the
// delivered message's.
//
// Spans are correlated with their outcome by scope, key and fence: when two
// executions of one key overlap in one process (one holds the claim, the other
// finds it in progress), the one in progress gets its own span and never ends the
// other's.
//
// # Metrics
//
// The instruments mirror the Prometheus plugin (contrib/idemprom): the same
// names in OpenTelemetry's form, the same attribute names as its label names, so
// that the same dashboards serve both:
//
//	idemkit.outcomes               counter {message}       scope, source, outcome, action, kind
//	idemkit.handler.duration       histogram s             scope, kind
//	idemkit.handlers.running       updowncounter {handler} scope
//	idemkit.store.latency          histogram s             scope, op (claim, settle, renew)
//	idemkit.store.messages         counter {message}       scope, op
//	idemkit.claim.answers          counter {message}       scope, answer (claimed, duplicate, in_progress, conflict, error)
//	idemkit.claim.takeovers        counter {message}       scope: claims that took a crashed or stalled owner's record over
//	idemkit.leases.lost            counter {lease}         scope
//	idemkit.retries                counter {message}       source, scope, kind
//	idemkit.dead_letters           counter {message}       source, scope, kind
//	idemkit.dead_letters.bodyless  counter {message}       source, scope
//	idemkit.commits                counter {commit}        source, topic
//	idemkit.kafka.commit.lag       gauge {record}          topic, partition
//	idemkit.acks                   counter {ack}           source, queue
//	idemkit.acked_messages         counter {message}       source, queue
//	idemkit.records                gauge {record}          scope, state (from a StateCounter)
//	idemkit.records.sampled        gauge                   scope: 1 when the counts are a sample's
//	idemkit.record_count           gauge s                 scope: how long the last count took
//	idemkit.record_count.errors    counter {count}         scope: counts that failed or ran out of time
//
// Through the OpenTelemetry Prometheus exporter
// (go.opentelemetry.io/otel/exporters/prometheus, with WithoutScopeInfo and
// WithoutTargetInfo) these become exactly the Prometheus plugin's metric names and
// labels: idemkit_outcomes_total{action,kind,outcome,scope,source},
// idemkit_handler_duration_seconds{kind,scope}, and so on.
//
// # Labels
//
// Attribute values are idemkit's one vocabulary, spelled the same in every
// instrument, in the spans and in the Prometheus plugin (contrib/idemprom):
//
//   - scope: the store's scope. WithScopeAttribute(false) drops it.
//   - source: execute (ExecuteIdempotently, ExecuteBatch), pipeline (or a
//     Pipeline's WithSource name), kafka, amqp, http, replay.
//   - outcome: success, duplicate, in_progress, error.
//   - action: what the entry point does with the message (consumer.ActionFor):
//     settle, wait, retry, dead_letter, or reject where the source has no
//     dead-letter destination (http answers a final error such as 422; replay
//     leaves the message failed).
//   - kind: the error's kind (consumer.ErrorKind): permanent, conflict, exhausted,
//     lease_lost, store_unavailable, corrupt, undecodable, invalid_key, no_key,
//     not_run, abandoned, interrupted, panic, config, handler; none without an error; unknown
//     for anything else. Dead letters' upper-case kinds (PERMANENT, NO_KEY, ...)
//     are counted in lower case. WithKindAttribute(false) drops it.
//   - op: claim, settle, renew. answer: claimed, duplicate, in_progress,
//     conflict, error (a takeover is counted as claimed too). state: started,
//     completed, failed, retry.
//
// Keys are never metric attributes. The commit lag keeps at most WithLagSeries
// partitions and forgets one not committed for WithLagExpiry; record counts are
// taken in the meter's collection, at most once per WithRecordInterval, each
// bounded by WithRecordTimeout.
package idemotel
