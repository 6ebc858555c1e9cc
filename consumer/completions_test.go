package consumer_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/store/memory"
)

// completionTable is a CompletionLookup over a map, as a transactional completion
// table would answer.
type completionTable struct {
	rows map[consumer.Key][]byte
	err  error
}

func (c *completionTable) Completed(_ context.Context, _ string, key consumer.Key) ([]byte, bool, error) {
	r, ok := c.rows[key]
	return r, ok, c.err
}

// A key whose attempts are used up, but whose effect committed with its
// completion beside it (its last attempt crashed after the commit), is a
// duplicate with the committed result, never an exhausted key.
func TestExhaustionFindsTheTransactionalCompletion(t *testing.T) {
	table := &completionTable{rows: map[consumer.Key][]byte{}}
	s := must(memory.NewStore(consumer.WithMaxAttempts(1), consumer.WithCompletions(table)))
	ctx := context.Background()
	fail := func(context.Context) (int, error) { return 0, errors.New("crashed after the commit") }
	for _, k := range []consumer.Key{"committed", "not-committed", "unknown"} {
		if r := consumer.ExecuteIdempotently(ctx, s, k, nil, fail); r.Outcome != consumer.Error {
			t.Fatalf("%s: %v", k, r.Outcome)
		}
	}
	table.rows["committed"] = []byte(`42`)
	ran := func(context.Context) (int, error) { t.Error("the handler ran again"); return 0, nil }
	r := consumer.ExecuteIdempotently(ctx, s, "committed", nil, ran)
	if r.Outcome != consumer.Duplicate || r.Err != nil || r.Value != 42 {
		t.Fatalf("committed key: %v %v %v, want DUPLICATE 42", r.Outcome, r.Err, r.Value)
	}
	r = consumer.ExecuteIdempotently(ctx, s, "not-committed", nil, ran)
	if r.Outcome != consumer.Duplicate || !errors.Is(r.Err, consumer.ErrAttemptsExhausted) {
		t.Fatalf("key without a completion: %v %v, want DUPLICATE of an exhausted key", r.Outcome, r.Err)
	}
	table.err = errors.New("connection refused")
	r = consumer.ExecuteIdempotently(ctx, s, "unknown", nil, ran)
	if r.Outcome != consumer.Error || !errors.Is(r.Err, consumer.ErrStoreUnavailable) || !r.Retryable() {
		t.Fatalf("lookup down: %v %v, want a retryable store error", r.Outcome, r.Err)
	}
}

// A lookup that fails never lets WithFailOpen run a key whose attempts are used up.
func TestFailedLookupIsNotFailOpen(t *testing.T) {
	table := &completionTable{rows: map[consumer.Key][]byte{}}
	s := must(memory.NewStore(consumer.WithMaxAttempts(1), consumer.WithCompletions(table), consumer.WithFailOpen(true)))
	ctx := context.Background()
	consumer.ExecuteIdempotently(ctx, s, "poison", nil, func(context.Context) (int, error) { return 0, errors.New("bad") })
	table.err = errors.New("connection refused")
	runs := 0
	for range 3 {
		r := consumer.ExecuteIdempotently(ctx, s, "poison", nil, func(context.Context) (int, error) { runs++; return 0, nil })
		if r.Unguarded || !errors.Is(r.Err, consumer.ErrStoreUnavailable) {
			t.Fatalf("lookup down: %v %v unguarded %v, want a store error, nothing run", r.Outcome, r.Err, r.Unguarded)
		}
	}
	if runs != 0 {
		t.Fatalf("the exhausted key's handler ran %d times", runs)
	}
}

// Completions hold JSON: another codec is refused with what to change.
func TestCompletionsNeedTheJSONCodec(t *testing.T) {
	_, err := memory.NewStore(consumer.WithCompletions(&completionTable{}), consumer.WithCodec(gobCodec{}))
	if !errors.Is(err, consumer.ErrInvalidConfig) {
		t.Fatalf("WithCompletions with another codec: %v, want a configuration error", err)
	}
}

type gobCodec struct{}

func (gobCodec) Marshal(any) ([]byte, error) { return nil, nil }
func (gobCodec) Unmarshal([]byte, any) error { return nil }
