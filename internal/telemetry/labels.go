package telemetry

import (
	"slices"
	"strings"

	"github.com/idemkit/idemkit/consumer"
)

// kinds are the error kinds, in the vocabulary's order.
var kinds = []string{consumer.KindPermanent, consumer.KindConflict, consumer.KindExhausted, consumer.KindLeaseLost,
	consumer.KindStoreUnavailable, consumer.KindCorrupt, consumer.KindUndecodable, consumer.KindInvalidKey, consumer.KindNoKey,
	consumer.KindNotRun, consumer.KindAbandoned, consumer.KindInterrupted, consumer.KindPanic, consumer.KindConfig,
	consumer.KindHandler}

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
//	action   ack wait retry dead_letter reject
//	kind     none permanent conflict exhausted lease_lost store_unavailable
//	         corrupt undecodable invalid_key no_key not_run abandoned interrupted panic
//	         config handler unknown
//	answer   claimed duplicate in_progress conflict error
//	op       claim settle renew
//	state    started completed failed retry
//
// What they mean:
//
//   - source: who ran the execution (the consumer.Source constants); a Pipeline
//     made with WithSource reports that name instead of "pipeline".
//   - outcome: the execution's Outcome (OutcomeLabel).
//   - action: what the entry point does with the message (ActionLabel): the
//     Action that consumer.ActionFor gives, except that an entry point with no
//     dead-letter destination rejects what a broker adapter would dead-letter:
//     the HTTP middleware answers with a final error (422 for a reused key, 500
//     for a key that failed for good) and replay leaves the message failed in
//     its source.
//   - kind: the error's kind (consumer.ErrorKind, or the upper-case
//     DeadLetterKind the dead-letter events carry, in lower case: KindLabel);
//     none without an error, unknown for a value outside the list. no_key is the
//     adapters' own, for a message that carries no key.
//   - answer: what a claim found (consumer.ClaimEvent's counts): claimed (the caller now
//     runs the handler; TakenOver counts those that took a crashed or stalled
//     owner's claim over), duplicate (the key is done, or failed for good),
//     in_progress (another owner holds a live claim), conflict (another payload),
//     error (the store failed, the record is corrupt, or the attempts ran out).
//   - op: the store call (claim, settle, renew).
//   - state: a record's state, as record counts report it.
func LabelValues() map[string][]string {
	return map[string][]string{
		"source": {consumer.SourceExecute, consumer.SourcePipeline, consumer.SourceKafka, consumer.SourceAMQP,
			consumer.SourceHTTP, consumer.SourceReplay},
		"outcome": {"success", "duplicate", "in_progress", "error"},
		"action":  {"ack", "wait", "retry", labelDeadLetter, labelReject},
		"kind":    append(append([]string{labelNone}, kinds...), labelUnknown),
		"answer":  {"claimed", "duplicate", "in_progress", "conflict", "error"},
		"op":      {"claim", "settle", "renew"},
		"state":   {"started", "completed", "failed", "retry"},
	}
}

// OutcomeLabel is o's label value: success, duplicate, in_progress or error.
func OutcomeLabel(o consumer.Outcome) string {
	switch o {
	case consumer.Success:
		return "success"
	case consumer.Duplicate:
		return "duplicate"
	case consumer.InProgress:
		return "in_progress"
	case consumer.Error:
		return "error"
	}
	return strings.ToLower(o.String())
}

// ActionLabel is the label value of what source does with a message whose action
// is a: settle, wait, retry, dead_letter, or reject where source has no
// dead-letter destination (consumer.SourceHTTP, consumer.SourceReplay) and a is
// consumer.DeadLetter.
func ActionLabel(source string, a consumer.Action) string {
	switch a {
	case consumer.Ack, consumer.Wait, consumer.Retry:
		return a.String()
	case consumer.DeadLetter:
		if source == consumer.SourceHTTP || source == consumer.SourceReplay {
			return labelReject
		}
		return labelDeadLetter
	}
	return a.String()
}

// KindLabel is an error kind's label value: the kind in lower case (so that an
// upper-case consumer.DeadLetterKind reads as the ErrorKind it came from), none for "" (no
// error), and unknown for anything outside the vocabulary, so that the label's
// values stay few.
func KindLabel(kind string) string {
	if kind == "" {
		return labelNone
	}
	if k := strings.ToLower(kind); slices.Contains(kinds, k) {
		return k
	}
	return labelUnknown
}
