// Package admintest is the conformance suite of the operator SPI (admin.Store):
// what unstick, forget and rerun do from every state, the fence precondition,
// the operator notes every later transition keeps, a scan paged by its cursor,
// batched reads, and values that are not records. Every store that implements
// admin.Store runs it from its tests, with a factory that returns a fresh, empty
// store (its own key prefix, table or schema on a shared server):
//
//	func TestOperator(t *testing.T) {
//		admintest.Run(t, admintest.Fixtures{
//			New: func(t *testing.T, opts ...consumer.Option) (admintest.Store, error) {
//				return memory.NewStore(opts...)
//			},
//		})
//	}
//
// The counts it checks are exact: every record it makes is listed once, counted
// once and changed as the transition's documentation says.
package admintest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/consumer"
)

// Store is a store with the operator SPI.
type Store interface {
	consumer.Store
	admin.Store
}

// Factory returns a new, empty store configured with opts; every call returns a
// store that shares no records with the stores of earlier calls.
type Factory func(t *testing.T, opts ...consumer.Option) (Store, error)

// Fixtures is what Run needs of a store. New is required; the hooks are for
// what not every store can do, and the sections that need them are skipped
// without them.
type Fixtures struct {
	// New makes each section's store.
	New Factory
	// Sibling, when set, returns a store over the same records as s (its prefix,
	// table or schema) configured with opts, which name another scope: the scan
	// section then checks that a scan of every scope finds the records of both
	// and a scan of one scope only its own. nil: the store holds one scope (a
	// memory store).
	Sibling func(t *testing.T, s Store, opts ...consumer.Option) (Store, error)
	// Plant, when set, writes values that are not idemkit records at record keys
	// of s's own scope and returns those keys (at least one). It may also write
	// values under the store's namespace that are no record key at all, which a
	// scan must pass over. nil: the corrupt-values section is skipped.
	Plant func(t *testing.T, s Store) []consumer.Key
	// ScanRepeats says the store's scan may return a record twice, as Redis SCAN
	// does while the server resizes its table. The UI suite (admin/ui/uitest)
	// then lets a listing show a record on two of its pages; without it, a record
	// on two pages fails that suite. A page shows a record once either way.
	ScanRepeats bool
}

// Run runs the whole suite as subtests of t.
func Run(t *testing.T, fx Fixtures) {
	if fx.New == nil {
		t.Fatal("admintest: Fixtures.New is nil: give a factory of fresh stores")
	}
	tests := []struct {
		name string
		fn   func(*testing.T, Fixtures)
	}{
		{"EveryOpFromEveryState", testMatrix},
		{"FencePrecondition", testFence},
		{"OtherScopeIsNotFound", testOtherScope},
		{"UnstickLetsTheNextDeliveryRun", testUnstick},
		{"ForgetStartsAfreshAboveTheFence", testForget},
		{"RerunRunsOnceMore", testRerun},
		{"NotesSurviveEveryTransition", testNotes},
		{"BadInput", testBadInput},
		{"Peek", testPeek},
		{"ScanPagesByCursor", testScan},
		{"ListAndStats", testListAndStats},
		{"CorruptValues", testCorrupt},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, fx) })
	}
}

// lease is every section's lease: no claim the suite leaves expires while it runs.
const lease = time.Hour

func must(t *testing.T, fx Fixtures, scope string) Store {
	t.Helper()
	s, err := fx.New(t, consumer.WithScope(scope), consumer.WithLease(lease))
	if err != nil {
		t.Fatalf("new store: %v", err)
	}
	return s
}

func inspector(t *testing.T, s Store) *admin.Inspector {
	t.Helper()
	in, err := admin.New(s)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// claimDead leaves key started by an owner that will never come back.
func claimDead(t *testing.T, s consumer.Store, key consumer.Key) consumer.ClaimReply {
	t.Helper()
	rep := s.Begin(context.Background(), []consumer.Claim{{Key: key, Owner: "dead-owner",
		Fingerprint: consumer.FingerprintOf([]byte("p")), Start: true}})[0]
	if !rep.Claimed() {
		t.Fatalf("claim %s: %+v", key, rep)
	}
	return rep
}

// run executes key once and returns the result and how often the handler ran.
func run(t *testing.T, s consumer.Store, key consumer.Key, payload string, fail error) (consumer.Result[string], int) {
	t.Helper()
	runs := 0
	res := consumer.ExecuteIdempotently(context.Background(), s, key, []byte(payload), func(ctx context.Context) (string, error) {
		runs++
		return "done", fail
	})
	return res, runs
}

// inspect reads key's record in the store's own scope.
func inspect(t *testing.T, in *admin.Inspector, key consumer.Key) admin.Record {
	t.Helper()
	rec, err := in.Inspect(context.Background(), "", key)
	if err != nil {
		t.Fatalf("inspect %s: %v", key, err)
	}
	return rec
}

// peek reads key's record through the SPI.
func peek(t *testing.T, s Store, key consumer.Key) consumer.AdminRecord {
	t.Helper()
	recs, err := s.PeekRecords(context.Background(), "", []consumer.Key{key})
	if err != nil {
		t.Fatalf("peek %s: %v", key, err)
	}
	if len(recs) != 1 {
		t.Fatalf("peek %s: %d records for one key", key, len(recs))
	}
	return recs[0]
}

// hasNotes reports whether notes are exactly these texts, newest first, each
// with its time.
func hasNotes(notes []consumer.OperatorNote, texts ...string) bool {
	if len(notes) != len(texts) {
		return false
	}
	for i, n := range notes {
		if n.Text != texts[i] || n.Time.IsZero() {
			return false
		}
	}
	return true
}

var errPermanent = consumer.Permanent(errors.New("card declined"))
