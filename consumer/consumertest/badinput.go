package consumertest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/consumer"
)

// The bad-input section: what a store does with a store value made wrong, a
// schema that is not there, and a value at a key that is not one of its records.
// What it needs differs per store, so each store's test supplies it.

// BadInputFixtures is what RunBadInput needs of one store. Every field but New
// is optional: a case whose fixture is nil is skipped, saying which fixture it
// wants (a store without a client has no typed-nil client, one without a schema
// no missing table).
type BadInputFixtures struct {
	// New returns a fresh, empty store, as for Run. Required.
	New Factory
	// NilStore is the store type's nil pointer as a consumer.Store (for
	// example consumer.Store((*dynamodb.Store)(nil))): every entry point must
	// refuse it with consumer.ErrInvalidConfig, and every Store method must
	// answer an error, none of them panicking.
	NilStore consumer.Store
	// NilClient makes the store the way a user does, from a typed-nil client
	// (a nil *redis.Client, *dynamodb.Client, *pgxpool.Pool: the value an
	// ignored constructor error leaves). It must return an error matching
	// consumer.ErrInvalidConfig that contains NilClientHint (what to pass),
	// without panicking.
	NilClient     func(t *testing.T) (consumer.Store, error)
	NilClientHint string
	// Missing makes a store on a table, database or schema that does not
	// exist. The store may refuse at once; otherwise every call must answer a
	// store outage (consumer.ErrStoreUnavailable: retryable, never counted as
	// an attempt, no handler run), and its Check method, when it has one,
	// likewise. Each error must contain every MissingHints entry: the name of
	// what is missing and the call that makes it.
	Missing      func(t *testing.T) (consumer.Store, error)
	MissingHints []string
	// Foreign are values that are not records, each written where a key's
	// record goes. Every call must treat the key as a corrupt record
	// (consumer.CorruptRecordError: not retryable, dead-lettered, no handler
	// run), and leave the value as it was.
	Foreign []ForeignValue
}

// ForeignValue is one value that is not a record of the store.
type ForeignValue struct {
	// Name says what is wrong with the value ("result is a string").
	Name string
	// Write stores the value where s keeps key's record and returns a function
	// that reads the stored value back in a form that compares equal when
	// nothing changed (a canonical dump).
	Write func(t *testing.T, s consumer.Store, key consumer.Key) (snapshot func() string)
}

// RunBadInput runs the bad-input section as subtests of t. Call it beside Run
// from the store's tests:
//
//	consumertest.RunBadInput(t, consumertest.BadInputFixtures{New: factory, NilStore: consumer.Store((*mystore.Store)(nil)), ...})
func RunBadInput(t *testing.T, fx BadInputFixtures) {
	if fx.New == nil {
		t.Fatal("consumertest: BadInputFixtures.New is required")
	}
	t.Run("TypedNilStore", func(t *testing.T) { testTypedNilStore(t, fx) })
	t.Run("TypedNilClient", func(t *testing.T) { testTypedNilClient(t, fx) })
	t.Run("MissingSchema", func(t *testing.T) { testMissingSchema(t, fx) })
	t.Run("ForeignValue", func(t *testing.T) {
		if len(fx.Foreign) == 0 {
			t.Skip("no BadInputFixtures.Foreign: the store has no way to hold a value that is not its record")
		}
		for _, fv := range fx.Foreign {
			t.Run(fv.Name, func(t *testing.T) { testForeignValue(t, fx, fv) })
		}
	})
}

// unhandled is a handler that fails the test if it runs.
func unhandled(t *testing.T) func(context.Context) (int, error) {
	return func(context.Context) (int, error) {
		t.Error("a handler ran on bad input")
		return 0, nil
	}
}

func unhandledBatch(t *testing.T) func(context.Context, int, consumer.BatchItem) (int, error) {
	return func(context.Context, int, consumer.BatchItem) (int, error) {
		t.Error("a batch handler ran on bad input")
		return 0, nil
	}
}

// calm runs fn and turns a panic into a test failure that names what panicked.
func calm(t *testing.T, what string, fn func()) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("%s panicked: %v", what, p)
		}
	}()
	fn()
}

func testTypedNilStore(t *testing.T, fx BadInputFixtures) {
	if fx.NilStore == nil {
		t.Skip("no BadInputFixtures.NilStore")
	}
	s, ctx, k := fx.NilStore, context.Background(), key("typed-nil-store")
	calm(t, "ExecuteIdempotently on a nil store", func() {
		expect(t, consumer.ExecuteIdempotently(ctx, s, k, nil, unhandled(t)), consumer.Error, consumer.ErrInvalidConfig)
	})
	calm(t, "ExecuteBatch on a nil store", func() {
		for _, r := range consumer.ExecuteBatch(ctx, s, []consumer.BatchItem{{Key: k}}, unhandledBatch(t)) {
			expect(t, r, consumer.Error, consumer.ErrInvalidConfig)
		}
	})
	calm(t, "the Store methods of a nil store", func() {
		if rep := s.Begin(ctx, []consumer.Claim{{Key: k, Owner: "o"}}); len(rep) != 1 || rep[0].Err == nil {
			t.Errorf("Begin: %+v, want one reply with an error", rep)
		}
		if rep := s.Settle(ctx, []consumer.Settlement{{Key: k, Owner: "o", Complete: true}}); len(rep) != 1 || rep[0].Err == nil {
			t.Errorf("Settle: %+v, want one reply with an error", rep)
		}
		if errs := s.Extend(ctx, []consumer.Owned{{Key: k, Owner: "o"}}); len(errs) != 1 || errs[0] == nil {
			t.Errorf("Extend: %v, want one error", errs)
		}
		if errs := s.Release(ctx, []consumer.Owned{{Key: k, Owner: "o"}}); len(errs) != 1 || errs[0] == nil {
			t.Errorf("Release: %v, want one error", errs)
		}
		if _, err := s.Peek(ctx, k); err == nil {
			t.Error("Peek: no error")
		}
	})
}

func testTypedNilClient(t *testing.T, fx BadInputFixtures) {
	if fx.NilClient == nil {
		t.Skip("no BadInputFixtures.NilClient: the store takes no client")
	}
	var err error
	calm(t, "making the store from a typed-nil client", func() { _, err = fx.NilClient(t) })
	if !errors.Is(err, consumer.ErrInvalidConfig) || !strings.Contains(err.Error(), fx.NilClientHint) {
		t.Fatalf("a store from a typed-nil client: err = %v, want ErrInvalidConfig saying %q", err, fx.NilClientHint)
	}
}

// checker is the optional readiness probe of a store.
type checker interface {
	Check(ctx context.Context) error
}

func testMissingSchema(t *testing.T, fx BadInputFixtures) {
	if fx.Missing == nil {
		t.Skip("no BadInputFixtures.Missing: the store has no table, database or schema that can be missing")
	}
	var s consumer.Store
	var err error
	calm(t, "making a store on a missing table", func() { s, err = fx.Missing(t) })
	if err != nil {
		if !errors.Is(err, consumer.ErrInvalidConfig) && !errors.Is(err, consumer.ErrStoreUnavailable) {
			t.Fatalf("refused at construction with %v, want ErrInvalidConfig or ErrStoreUnavailable", err)
		}
		wantHints(t, "construction", err, fx.MissingHints)
		return
	}
	ctx := context.Background()
	if c, ok := s.(checker); ok {
		calm(t, "Check", func() {
			err := c.Check(ctx)
			if !errors.Is(err, consumer.ErrStoreUnavailable) {
				t.Fatalf("Check: %v, want ErrStoreUnavailable", err)
			}
			wantHints(t, "Check", err, fx.MissingHints)
		})
	}
	outage := func(what string, r consumer.Result[int]) {
		t.Helper()
		expect(t, r, consumer.Error, consumer.ErrStoreUnavailable)
		wantHints(t, what, r.Err, fx.MissingHints)
		if r.Attempt != 0 || !r.Retryable() || r.Action() != consumer.Retry {
			t.Fatalf("%s: attempt %d, retryable %v, action %v; want no attempt counted, retry", what, r.Attempt, r.Retryable(), r.Action())
		}
	}
	k := key("missing", nonce())
	calm(t, "ExecuteIdempotently on a missing table", func() {
		// Every delivery is an outage, however many there are: none is an attempt.
		for i := 0; i < 3; i++ {
			outage("ExecuteIdempotently", consumer.ExecuteIdempotently(ctx, s, k, nil, unhandled(t)))
		}
	})
	calm(t, "ExecuteBatch on a missing table", func() {
		for _, r := range consumer.ExecuteBatch(ctx, s, []consumer.BatchItem{{Key: k}, {Key: key("missing", nonce())}}, unhandledBatch(t)) {
			outage("ExecuteBatch", r)
		}
	})
	calm(t, "Peek on a missing table", func() {
		_, err := s.Peek(ctx, k)
		if !errors.Is(err, consumer.ErrStoreUnavailable) {
			t.Fatalf("Peek: %v, want ErrStoreUnavailable", err)
		}
		wantHints(t, "Peek", err, fx.MissingHints)
	})
}

func wantHints(t *testing.T, what string, err error, hints []string) {
	t.Helper()
	for _, h := range hints {
		if !strings.Contains(err.Error(), h) {
			t.Fatalf("%s: %v; want an error that names %q", what, err, h)
		}
	}
}

func testForeignValue(t *testing.T, fx BadInputFixtures, fv ForeignValue) {
	s := must(t, fx.New)
	ctx := context.Background()
	k := key("foreign", fv.Name)
	snapshot := fv.Write(t, s, k)
	before := snapshot()
	corrupt := func(what string, r consumer.Result[int]) {
		t.Helper()
		var ce *consumer.CorruptRecordError
		if r.Outcome != consumer.Error || !errors.As(r.Err, &ce) || ce.Key != k || ce.Reason == "" {
			t.Fatalf("%s: outcome %v, err %v; want ERROR with a *CorruptRecordError at the key", what, r.Outcome, r.Err)
		}
		if r.Retryable() || r.Action() != consumer.DeadLetter {
			t.Fatalf("%s: retryable %v, action %v; want dead-letter", what, r.Retryable(), r.Action())
		}
	}
	calm(t, "ExecuteIdempotently on a foreign value", func() {
		corrupt("ExecuteIdempotently", consumer.ExecuteIdempotently(ctx, s, k, nil, unhandled(t)))
		// Again: the first call left the value as it was, so it is still refused.
		corrupt("ExecuteIdempotently again", consumer.ExecuteIdempotently(ctx, s, k, nil, unhandled(t)))
	})
	calm(t, "ExecuteBatch on a foreign value", func() {
		corrupt("ExecuteBatch", consumer.ExecuteBatch(ctx, s, []consumer.BatchItem{{Key: k}}, unhandledBatch(t))[0])
	})
	calm(t, "Peek on a foreign value", func() {
		if _, err := s.Peek(ctx, k); !errors.Is(err, consumer.ErrCorruptRecord) {
			t.Fatalf("Peek: %v, want ErrCorruptRecord", err)
		}
	})
	// Calls that name a claim nobody made: refused (not the owner's, or corrupt).
	calm(t, "the Store methods on a foreign value", func() {
		owned := []consumer.Owned{{Key: k, Owner: "not-an-owner", Fence: 1}}
		if rep := s.Settle(ctx, []consumer.Settlement{{Key: k, Owner: "not-an-owner", Complete: true, Result: []byte("1")}}); rep[0].Err == nil {
			t.Error("Settle of a foreign value answered no error")
		}
		if err := s.Settle(ctx, []consumer.Settlement{{Key: k, Owner: "not-an-owner", Message: "x"}})[0].Err; err == nil {
			t.Error("a failure settled on a foreign value answered no error")
		}
		if err := s.Extend(ctx, owned)[0]; err == nil {
			t.Error("Extend of a foreign value answered no error")
		}
		if err := s.Release(ctx, owned)[0]; err == nil {
			t.Error("Release of a foreign value answered no error")
		}
	})
	if after := snapshot(); after != before {
		t.Fatalf("the foreign value was changed:\nbefore %s\nafter  %s", before, after)
	}
}
