// Package idemotel traces and measures idemkit's executions with OpenTelemetry.
//
// Import it as
//
//	idemotel "github.com/idemkit/idemkit/contrib/otel"
//
// NewTracer returns a *Tracer and NewMeter a *Meter: observers to install on a
// store with consumer.WithObserver. Every execution that uses the store reports to
// them: ExecuteIdempotently and ExecuteBatch, a consumer.Pipeline, the broker
// adapters, the HTTP middleware and replay.
//
//	tr, err := idemotel.NewTracer()                 // the global TracerProvider
//	mt, err := idemotel.NewMeter()                  // the global MeterProvider
//	store, err := consumer.NewRedisStore(rdb, consumer.WithScope("payments"), consumer.WithObserver(tr, mt))
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
//	idemkit.outcome                 SUCCESS, DUPLICATE, IN_PROGRESS or ERROR
//	idemkit.action                  settle, wait, retry or dead-letter
//	error.type                      the error's kind (consumer.ErrorKind), when there is an error
//
// A span whose outcome is ERROR has status Error with the error's kind as its
// description (so does a handler span ended before its outcome was known, when the
// handler returned an error). The error's text is not recorded: it may carry
// payload data.
//
// Attributes are added to a handler's span only once it is known to record: a
// sampler sees the span's kind, name and links, and an unsampled execution costs
// no attribute at all.
//
// # The producer's trace
//
// Adapters put the delivered message's headers in the handler's context
// (consumer.ContextWithCarrier). The tracer extracts the producer's trace context
// from them with the propagator (default W3C trace context and baggage) and adds
// it to the span as a link: a consumer's work is its own trace, linked to the
// trace that produced the message, so one slow consumer does not stretch the
// producer's trace and a redelivered message does not add spans to a finished
// trace. WithProducerAsParent(true) makes it the span's parent instead. The
// producer's baggage, if any, is put in the handler's context.
//
// Inject (called by adapters through consumer.InjectTrace for the dead-letter and
// retry copies they produce) writes the trace context of the given context, that
// of the execution's span when called with the handler's context, into the
// copy's headers with the same propagator; called with a context without a span,
// it writes the delivered message's own trace context, if its headers had one.
//
// Spans are correlated with their outcome by scope, key and fence: when two
// executions of one key overlap in one process (one holds the claim, the other
// finds it in progress), the one in progress gets its own span and never ends the
// other's.
//
// # Metrics
//
// The instruments mirror the Prometheus plugin (contrib/prometheus): the same
// names in OpenTelemetry's form, the same attribute names as its label names, so
// that the same dashboards serve both:
//
//	idemkit.outcomes               counter {message}       scope, source, outcome, action, kind
//	idemkit.handler.duration       histogram s             scope, kind
//	idemkit.handlers.running       updowncounter {handler} scope
//	idemkit.store.latency          histogram s             scope, op (claim, settle, renew)
//	idemkit.store.messages         counter {message}       scope, op
//	idemkit.claim.answers          counter {message}       scope, answer (claimed, duplicate, in_progress, conflict, error)
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
// The values are those of the Prometheus plugin: outcome success, duplicate,
// in_progress or error; kind the error's kind or "none"; WithScopeAttribute(false)
// and WithKindAttribute(false) drop the scope and kind attributes. Keys are never
// metric attributes. The commit lag keeps at most WithLagSeries partitions and
// forgets one not committed for WithLagExpiry; record counts are taken in the
// meter's collection, at most once per WithRecordInterval, each bounded by
// WithRecordTimeout.
package idemotel
