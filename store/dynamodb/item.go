package dynamodb

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemkit/idemkit/consumer"
)

// The attributes of a record item. A started record has own, lease, (when
// claimed under the key's lock) locked and (when its claim is an attempt) cnt;
// a completed one res or dropped; failed and retry records perm (permanent
// failure) and the error history. Every record has pk, st, fence, attempts,
// created, updated and expires, and fp when a claim brought a fingerprint.
//
//	pk        S     prefix + ":{" + scope + "}" + key
//	st        S     started, completed, failed, retry, or forgotten (an operator
//	                removed the record: its fence, error history and notes kept)
//	own       S     the owner token of the running attempt
//	fence     N     +1 on every claim and takeover, never reset while the item lives
//	attempts  N     attempts counted against the maximum
//	fp        B     16 bytes: the payload fingerprint
//	lease     N     the running attempt's lease deadline, unix ms, on the clock of
//	                the worker that claimed or renewed it
//	locked    BOOL  the running attempt was claimed under the key's lock
//	cnt       BOOL  the current claim is an attempt: its handler started
//	                (consumer.Claim.Start); absent: claimed ahead of its handler,
//	                so a takeover charges no attempt
//	res       B     the encoded result
//	dropped   S     why the result was not kept (its size, or "unencodable")
//	perm      BOOL  the failure was permanent
//	h0        M     the last error: t (N, unix s), m (S, at most consumer.MaxErrorText bytes)
//	hs        M     the last error again, its text cut to consumer.HistoryText bytes
//	h1..h3    M     older errors, newest first, cut likewise (NULL: none)
//	created   N     unix s of the first claim (the claiming worker's clock)
//	notes     L     the operator notes, newest first (at most consumer.NotesLen): maps
//	                of t (N, unix s) and m (S, at most consumer.MaxNoteText bytes); absent
//	                until an operator changes the record, then kept by every
//	                transition until the record expires
//	updated   N     unix s of the last transition
//	expires   N     unix s: the TTL attribute; a started record lives lease +
//	                retention from its claim or renewal, a settled one the
//	                retention from its settlement. An item past it is absent to
//	                every read, before DynamoDB deletes it.
const (
	attrPK       = "pk"
	attrExpires  = "expires"
	stateStarted = "started"
	stateDone    = "completed"
	stateFailed  = "failed"
	stateRetry   = "retry"
	stateForgot  = "forgotten"
)

// item is a decoded record item.
type item struct {
	state     string
	owner     string
	fence     int64
	attempts  int
	fp        consumer.Fingerprint
	lease     int64 // unix ms
	locked    bool
	counted   bool // the current claim (state started) is an attempt
	result    []byte
	dropped   string
	permanent bool
	history   []consumer.AttemptError // newest first
	created   int64                   // unix s
	updated   int64                   // unix s
	expires   int64                   // unix s
	notes     []consumer.OperatorNote // newest first
}

// live reports whether the item has not expired at nowMs.
func (it *item) live(nowMs int64) bool { return it.expires*1000 > nowMs }

func (it *item) lastError() string {
	if len(it.history) == 0 {
		return ""
	}
	return it.history[0].Message
}

// Values for expressions.

func numAV(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}
func strAV(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

var (
	avNull   types.AttributeValue = &types.AttributeValueMemberNULL{Value: true}
	avTrue   types.AttributeValue = &types.AttributeValueMemberBOOL{Value: true}
	avZero                        = numAV(0)
	avOne                         = numAV(1)
	avStart                       = strAV(stateStarted)
	avDone                        = strAV(stateDone)
	avFail                        = strAV(stateFailed)
	avRetry                       = strAV(stateRetry)
	avForgot                      = strAV(stateForgot)
)

// ceilSec is ms rounded up to whole seconds: an expiry in the TTL attribute
// never comes before the one asked for.
func ceilSec(ms int64) int64 { return (ms + 999) / 1000 }

// historyEntry is one error as the record keeps it, its text cut to limit bytes
// on a UTF-8 boundary (DynamoDB strings are UTF-8).
func historyEntry(sec int64, msg string, limit int) types.AttributeValue {
	msg = strings.ToValidUTF8(msg, "\uFFFD")
	if len(msg) > limit {
		cut := limit
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut]
	}
	return &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"t": numAV(sec), "m": strAV(msg)}}
}

// errorValues are the expression values that push msg onto a record's error
// history: :h0 (the text capped at consumer.MaxErrorText) and :hs (cut to
// consumer.HistoryText, what it becomes when a newer error comes).
func errorValues(vals map[string]types.AttributeValue, sec int64, msg string) {
	msg = consumer.CapText(strings.ToValidUTF8(msg, "\uFFFD"), consumer.MaxErrorText)
	vals[":h0"] = historyEntry(sec, msg, consumer.MaxErrorText)
	vals[":hs"] = historyEntry(sec, msg, consumer.HistoryText)
	vals[":nul"] = avNull
}

// pushError is the update actions that put :h0 first in the history, keeping
// consumer.HistoryLen entries (h0, h1, h2, h3).
const pushError = "h3 = if_not_exists(h2, :nul), h2 = if_not_exists(h1, :nul), h1 = if_not_exists(hs, :nul), hs = :hs, h0 = :h0"

// dropHistory removes the error history (completed and fresh records keep none).
const dropHistory = "h0, hs, h1, h2, h3"
