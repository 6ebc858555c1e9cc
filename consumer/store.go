package consumer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// Store keeps idempotency records. Four implementations ship, as peers in the
// store directory: store/redis (on the Lua scripts of package lua), store/postgres,
// store/dynamodb and store/memory (one process, for tests and demos). Package
// consumertest holds the conformance suite every Store must pass.
//
// Every method takes a batch and answers item by item, in input order; a failure to
// reach the store shows in each item's Err as a *StoreError. A store must not keep
// the slices it is given once the call has returned: callers reuse them. Transitions are
// compare-and-set on the owner token. Every method tolerates being called again
// with the same arguments after a lost reply: a claim by the owner token that holds
// the record answers with that claim, and a completion, failure or release already
// applied by the same owner answers as the first call did.
type Store interface {
	// Settings returns the store's resolved options.
	Settings() Settings
	// Begin claims records, in one round trip.
	Begin(ctx context.Context, claims []Claim) []ClaimReply
	// Settle completes or fails claimed records, in one round trip.
	Settle(ctx context.Context, items []Settlement) []SettleReply
	// Extend renews the leases of running attempts. An item's error is ErrLeaseLost
	// (as a *LeaseLostError) when the claim is no longer the owner's.
	Extend(ctx context.Context, items []Owned) []error
	// Release gives claims back without a result; the abandoned attempt is not counted.
	Release(ctx context.Context, items []Owned) []error
	// Peek reads one record without changing it.
	Peek(ctx context.Context, key Key) (Record, error)
}

// StoreInto is an optional interface of a Store: Begin and Settle answering into
// slices the caller gives, so that a caller that makes many calls reuses its
// slices instead of taking a new one per call. The engines (ExecuteBatch, the
// Pipeline) use it when a store has it; store/redis does.
//
// BeginInto answers claims as Begin does, claim i in out[i]; SettleInto answers
// items as Settle does, item i in out[i]. out has one element per item, each
// zero. Like the items, out is not kept once the call has returned.
//
// A store wrapper that embeds a store with these methods and changes what Begin
// or Settle do must change these two alike (or not embed them): the engines call
// them in place of Begin and Settle.
type StoreInto interface {
	BeginInto(ctx context.Context, claims []Claim, out []ClaimReply)
	SettleInto(ctx context.Context, items []Settlement, out []SettleReply)
}

// Claim asks to begin an attempt on Key.
type Claim struct {
	Key         Key
	Owner       string      // owner token of the new attempt (random per attempt)
	Fingerprint Fingerprint // payload fingerprint; zero when fingerprinting is off
	// Locked says the caller holds the key's distributed lock (WithLock). The claim
	// is recorded as made under the lock, and a started record whose claim was made
	// under the lock is taken over even while its lease is live: its holder lost the
	// lock. A record claimed without the lock is never taken over before its lease
	// runs out, since its owner may be alive and renewing.
	Locked bool
	// Start says the claim's handler starts now: the attempt counts from here. A
	// claim made ahead of its handler (Start false) is not an attempt yet: when its
	// owner dies before the handler ran, or while the first handler of a fresh claim
	// ran, the next claim takes the record over without charging an attempt, and
	// answers StatusTakenOver. A claim sent with Start by the owner that holds the
	// record marks that claim counted (the engine does so right before it runs the
	// handler of a claim it took over), so that a message that kills its worker
	// every time still uses its attempts up.
	Start bool
	// ReadFirst is a hint: the key has probably been settled already (an HTTP
	// client sending a request again), so the store may read the record before it
	// writes anything, and answer a completed or failed record whose fingerprint
	// matches from that read alone. The answer is the one the claim gets without
	// the hint; only its cost differs: a replay costs one read, and a key with no
	// record one round trip more. A store may ignore it (the memory, PostgreSQL and
	// DynamoDB stores do: their claim costs the same either way); the Redis store
	// honours it. The HTTP middleware sets it on every claim; the engine never does.
	ReadFirst bool
}

// ClaimStatus is what Begin found at a key.
type ClaimStatus int

// Claim statuses: what a claim found at the key.
const (
	StatusAcquired   ClaimStatus = iota + 1 // claimed: no record, a retry record, or the caller's own claim
	StatusTakenOver                         // claimed: the previous owner's lease had expired (or it lost the key's lock)
	StatusInProgress                        // another owner holds a live lease
	StatusCompleted                         // done: Result holds the stored result
	StatusFailed                            // failed for good: Message holds the stored error
	StatusExhausted                         // the last attempt was used: now failed
	StatusConflict                          // the stored fingerprint differs
)

var statusNames = [...]string{"", "ACQUIRED", "TAKEN_OVER", "IN_PROGRESS", "COMPLETED", "FAILED", "EXHAUSTED", "CONFLICT"}

func (s ClaimStatus) String() string {
	if s > 0 && int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "UNKNOWN"
}

// ClaimReply is Begin's answer for one claim.
type ClaimReply struct {
	Status   ClaimStatus
	Fence    int64
	Attempts int
	// Lease is the lease granted (Acquired, TakenOver; the lease left when the claim
	// found the caller's own owner token) or left to the other owner (InProgress).
	Lease time.Duration
	// Result is the stored result (Completed); Dropped is "" when it was kept, the
	// decimal size of a result too large to keep, or "unencodable".
	Result  []byte
	Dropped string
	// Message is the stored error text (Failed, Exhausted); Permanent says whether the
	// failure was permanent (else attempts were exhausted).
	Message   string
	Permanent bool
	// Created is when the record was first claimed (the claiming worker's clock,
	// second precision).
	Created time.Time
	// Fingerprint is the record's, once claimed (a record keeps the first
	// fingerprint a claim brought); pass it back in Settlement.
	Fingerprint Fingerprint
	// Ref is the store's own name for the record (for Redis, its key). Pass it back
	// unchanged in Owned and Settlement so the store need not work it out again.
	Ref string
	// Err is set when the claim could not be decided: a *StoreError or a *CorruptRecordError.
	Err error
}

// Claimed reports whether the caller now owns the attempt.
func (r ClaimReply) Claimed() bool {
	return r.Err == nil && (r.Status == StatusAcquired || r.Status == StatusTakenOver)
}

// Settlement finishes one claimed attempt. Key and Owner name it; Ref, Fence,
// Attempts, Created and Fingerprint repeat what Begin answered for the claim, so
// that a store can write the settled record whole without reading it first. A
// caller that does not know them passes Fence 0: the store keeps the record's own
// (at some cost), but a settlement sent again after a lost reply is then refused
// as lease lost, since it is known by its fence.
type Settlement struct {
	Key         Key
	Owner       string
	Ref         string // ClaimReply.Ref, or "" (the store works it out)
	Fence       int64
	Attempts    int
	Created     time.Time
	Fingerprint Fingerprint // the claim's fingerprint; zero when off
	// Late says the attempt's local deadline had passed: its lease may have run out
	// on the store, so the retention must start afresh from the settlement.
	Late bool
	// Complete stores Result (and Dropped, see ClaimReply). Otherwise the failure is
	// recorded: Permanent fails the key for good; a retryable failure leaves it to
	// the next delivery unless it was the last allowed attempt.
	Complete  bool
	Result    []byte
	Dropped   string
	Permanent bool
	Message   string
}

// SettleReply is Settle's answer for one item.
type SettleReply struct {
	// Terminal: a failure left the record failed for good (permanent, or last attempt).
	Terminal bool
	// Err is a *LeaseLostError when the attempt no longer owned the claim, a
	// *StoreError or a *CorruptRecordError.
	Err error
}

// Owned names a claim by key and owner token.
type Owned struct {
	Key   Key
	Owner string
	Ref   string // ClaimReply.Ref, or "" (the store works it out)
	Fence int64  // the claim's fence: a release sent again is known by it
}

// Record is a snapshot of one record, for inspection.
type Record struct {
	Key         Key
	Found       bool
	State       string // started, completed, failed, retry
	Owner       string
	Fence       int64
	Attempts    int
	Fingerprint Fingerprint // zero when the record has none
	LeaseUntil  time.Time   // zero when no attempt runs
	Retention   time.Duration
	Result      []byte
	Dropped     string
	Error       string         // the last attempt's error (failed, retry)
	History     []AttemptError // the last attempts' errors, newest first
	Permanent   bool
	Locked      bool // the current claim was made under the key's distributed lock
	// Counted: the current claim (state started) is an attempt: a takeover charges it.
	Counted bool
	Created time.Time
	Updated time.Time
	Now     time.Time     // the store's clock at the read
	TTL     time.Duration // time to live left; -1 when the record has none
}

// AttemptError is one failed attempt's error, as the record keeps it.
type AttemptError struct {
	Time    time.Time
	Message string
}

// Fingerprint identifies a payload: the first 16 bytes of its SHA-256. The zero
// value means no fingerprint (fingerprinting off).
type Fingerprint [16]byte

// FingerprintOf returns payload's fingerprint.
func FingerprintOf(payload []byte) Fingerprint {
	sum := sha256.Sum256(payload)
	return Fingerprint(sum[:16])
}

// IsZero reports whether f is no fingerprint.
func (f Fingerprint) IsZero() bool { return f == Fingerprint{} }

// String is f in hex, or "" for no fingerprint.
func (f Fingerprint) String() string {
	if f.IsZero() {
		return ""
	}
	return hex.EncodeToString(f[:])
}
