// Package consumertest is the conformance suite that every consumer.Store must pass:
// the idempotency state machine observed through ExecuteIdempotently,
// ExecuteBatch and the Store methods, with exact counts. Run it from a test with a
// factory that returns a fresh, empty store (its own key prefix on a shared server):
//
//	func TestConformance(t *testing.T) {
//		consumertest.Run(t, func(t *testing.T, opts ...consumer.Option) (consumer.Store, error) {
//			return memory.NewStore(opts...)
//		})
//	}
//
// RunBadInput is its bad-input section: a typed-nil store and client, a missing
// table, values at a key that are not records. What it needs differs per store,
// so the store's test supplies it in BadInputFixtures.
package consumertest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/idemkit/idemkit/consumer"
)

// Factory returns a new, empty store configured with opts; every call returns a
// store that shares no records with the stores of earlier calls.
type Factory func(t *testing.T, opts ...consumer.Option) (consumer.Store, error)

// Run runs the whole suite as subtests of t.
func Run(t *testing.T, newStore Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, Factory)
	}{
		{"SuccessThenDuplicate", testSuccessThenDuplicate},
		{"HandlerSeesKeyAttemptFence", testHandlerInfo},
		{"ConcurrentExactlyOnce", testConcurrentExactlyOnce},
		{"RetryAfterRetryableError", testRetry},
		{"ExhaustedAfterMaxAttempts", testExhausted},
		{"PermanentError", testPermanent},
		{"PayloadConflict", testConflict},
		{"FingerprintOff", testFingerprintOff},
		{"StalledOwnerLosesToTakeover", testTakeover},
		{"TakeoverOnLastAttemptExhausts", testTakeoverExhausts},
		{"ClaimsAreNotAttempts", testClaimsAreNotAttempts},
		{"StartMarksTheOwnClaimCounted", testStartMarksOwnClaim},
		{"TakenOverClaimsRunCounted", testTakenOverClaimsRunCounted},
		{"ExpiredLeaseNoTakeoverStillCompletes", testExpiredLeaseCompletes},
		{"HeartbeatKeepsLongHandler", testHeartbeat},
		{"RenewalFailureCancelsHandler", testRenewalFailure},
		{"SilentTakeoverGivesLeaseLost", testSilentTakeover},
		{"ReleaseDoesNotCountAttempt", testRelease},
		{"AbandonReleasesWithoutCounting", testAbandon},
		{"CallsSentAgainAnswerAsBefore", testResend},
		{"LockForcesOnlyClaimsMadeUnderIt", testLockedClaims},
		{"ResultTooLarge", testResultTooLarge},
		{"UndecodableStoredResult", testUndecodable},
		{"WaitInProgress", testWaitInProgress},
		{"PanicIsRetryable", testPanic},
		{"AlreadyAppliedIsADuplicate", testAlreadyApplied},
		{"MarkCompletedSkipsTheSettlement", testMarkCompleted},
		{"BadInput", testBadInput},
		{"InvalidOptions", testInvalidOptions},
		{"BatchInOrderExactlyOnce", testBatch},
		{"BatchConcurrentPerMessage", testBatchConcurrent},
		{"BatchCancelledReleasesUnstarted", testBatchCancelled},
		{"BatchStopAfterFailure", testBatchStopAfterFailure},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newStore) })
	}
}

var ns = uuid.MustParse("6f0c3c2e-7d7e-4a57-9a36-4f7d2b1f0c11")

// liveLease is the lease of the sections whose claims must stay live while a
// store round trip or a handler runs, and which also wait a lease out. A claim
// the engine sends is usable only if answered within the lease less its margin,
// and a handler is stopped when no renewal lands within it: a second is many
// round trips even on a loaded test server, where 100 ms was not.
const liveLease = time.Second

func must(t *testing.T, f Factory, opts ...consumer.Option) consumer.Store {
	t.Helper()
	s, err := f(t, opts...)
	if err != nil {
		t.Fatalf("new store: %v", err)
	}
	return s
}

func key(parts ...string) consumer.Key { return consumer.NewKey(ns, parts...) }

func nonce() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

type value struct {
	Key   string `json:"key"`
	Nonce string `json:"nonce"`
}

func expect[T any](t *testing.T, r consumer.Result[T], want consumer.Outcome, target error) {
	t.Helper()
	if r.Outcome != want {
		t.Fatalf("outcome = %v (err %v), want %v", r.Outcome, r.Err, want)
	}
	switch {
	case target == nil && r.Err != nil:
		t.Fatalf("err = %v, want none", r.Err)
	case target != nil && !errors.Is(r.Err, target):
		t.Fatalf("err = %v, want one matching %v", r.Err, target)
	}
}
