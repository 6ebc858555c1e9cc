package consumer

import (
	"context"
	"strings"

	"github.com/idemkit/idemkit/internal/observe"
)

// Sources: who ran an execution, as the events name it (OutcomeEvent.Source,
// HandlerEvent.Source and the adapters' events).
const (
	SourceExecute  = "execute"  // ExecuteIdempotently and ExecuteBatch called directly
	SourcePipeline = "pipeline" // a Pipeline without WithSource
	SourceKafka    = "kafka"    // the Kafka adapter
	SourceAMQP     = "amqp"     // the RabbitMQ adapter
	SourceHTTP     = "http"     // the HTTP middleware
	SourceReplay   = "replay"   // replay and redrive
)

// Label values that are not names of their own elsewhere.
const (
	labelNone       = "none"    // kind: no error
	labelUnknown    = "unknown" // kind: a value outside the vocabulary
	labelDeadLetter = "dead_letter"
	labelReject     = "reject"
)

// LabelValues returns the vocabulary of the labels that observers make of events:
// every value each label takes, by label name. The Prometheus plugin
// (contrib/idemprom) and the OpenTelemetry plugin (contrib/idemotel) label every
// metric, and the tracer every span, with these values and no others, so that one
// thing is spelled one way everywhere:
//
//	label    values
//	-------  ------------------------------------------------------------
//	source   execute pipeline kafka amqp http replay
//	outcome  success duplicate in_progress error
//	action   settle wait retry dead_letter reject
//	kind     none permanent conflict exhausted lease_lost store_unavailable
//	         corrupt undecodable invalid_key no_key not_run abandoned interrupted panic
//	         config handler unknown
//	answer   claimed duplicate in_progress conflict error
//	op       claim settle renew
//	state    started completed failed retry
//
// What they mean:
//
//   - source: who ran the execution (the Source constants); a Pipeline made
//     with WithSource reports that name instead of "pipeline".
//   - outcome: the execution's Outcome (OutcomeLabel).
//   - action: what the entry point does with the message (ActionLabel): the
//     Action that ActionFor gives, except that an entry point with no
//     dead-letter destination rejects what a broker adapter would dead-letter:
//     the HTTP middleware answers with a final error (422 for a reused key, 500
//     for a key that failed for good) and replay leaves the message failed in
//     its source.
//   - kind: the error's kind (ErrorKind, or the upper-case DeadLetterKind the
//     dead-letter events carry, in lower case: KindLabel); none without an error,
//     unknown for a value outside the list. no_key is the adapters' own, for a
//     message that carries no key.
//   - answer: what a claim found (ClaimEvent's counts): claimed (the caller now
//     runs the handler; TakenOver counts those that took a crashed or stalled
//     owner's claim over), duplicate (the key is done, or failed for good),
//     in_progress (another owner holds a live claim), conflict (another payload),
//     error (the store failed, the record is corrupt, or the attempts ran out).
//   - op: the store call (claim, settle, renew).
//   - state: a record's state, as record counts report it.
func LabelValues() map[string][]string {
	return map[string][]string{
		"source":  {SourceExecute, SourcePipeline, SourceKafka, SourceAMQP, SourceHTTP, SourceReplay},
		"outcome": {"success", "duplicate", "in_progress", "error"},
		"action":  {"settle", "wait", "retry", labelDeadLetter, labelReject},
		"kind": {labelNone, KindPermanent, KindConflict, KindExhausted, KindLeaseLost, KindStoreUnavailable,
			KindCorrupt, KindUndecodable, KindInvalidKey, KindNoKey, KindNotRun, KindAbandoned, KindInterrupted, KindPanic,
			KindConfig, KindHandler, labelUnknown},
		"answer": {"claimed", "duplicate", "in_progress", "conflict", "error"},
		"op":     {"claim", "settle", "renew"},
		"state":  {"started", "completed", "failed", "retry"},
	}
}

// OutcomeLabel is o's label value: success, duplicate, in_progress or error.
func OutcomeLabel(o Outcome) string {
	switch o {
	case Success:
		return "success"
	case Duplicate:
		return "duplicate"
	case InProgress:
		return "in_progress"
	case Error:
		return "error"
	}
	return strings.ToLower(o.String())
}

// ActionLabel is the label value of what source does with a message whose action
// is a: settle, wait, retry, dead_letter, or reject where source has no
// dead-letter destination (SourceHTTP, SourceReplay) and a is DeadLetter.
func ActionLabel(source string, a Action) string {
	switch a {
	case Settle, Wait, Retry:
		return a.String()
	case DeadLetter:
		if source == SourceHTTP || source == SourceReplay {
			return labelReject
		}
		return labelDeadLetter
	}
	return a.String()
}

// KindLabel is an error kind's label value: the kind in lower case (so that an
// upper-case DeadLetterKind reads as the ErrorKind it came from), none for "" (no
// error), and unknown for anything outside the vocabulary, so that the label's
// values stay few.
func KindLabel(kind string) string {
	if kind == "" {
		return labelNone
	}
	k := strings.ToLower(kind)
	switch k {
	case KindPermanent, KindConflict, KindExhausted, KindLeaseLost, KindStoreUnavailable, KindCorrupt,
		KindUndecodable, KindInvalidKey, KindNoKey, KindNotRun, KindAbandoned, KindInterrupted, KindPanic, KindConfig, KindHandler:
		return k
	}
	return labelUnknown
}

// sourceOf is the source an event reports: the engine's, unless the engine's is
// SourceExecute and ctx, the context the execution was made with, names another
// (the HTTP middleware names itself so).
func sourceOf(ctx context.Context, engine string) string {
	if engine != SourceExecute || ctx == nil {
		return engine
	}
	if s := observe.SourceOf(ctx); s != "" {
		return s
	}
	return engine
}
