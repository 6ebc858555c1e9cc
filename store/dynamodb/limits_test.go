package dynamodb

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/consumer"
)

// TestResultLimit: a store has one result limit, what an item holds: the
// engine decides with it (SUCCESS says the result was dropped), duplicates
// name it, and a WithMaxResultSize above it is refused at construction.
func TestResultLimit(t *testing.T) {
	ctx := context.Background()
	s := mustStore(t, Config{ClockSkew: NoClockSkew})
	if got := s.Settings().MaxResultSize; got != MaxResult {
		t.Fatalf("Settings().MaxResultSize = %d by default, want MaxResult (%d)", got, MaxResult)
	}
	runs := 0
	over := func(ctx context.Context) (string, error) { runs++; return strings.Repeat("x", MaxResult), nil } // MaxResult+2 bytes of JSON
	r := consumer.ExecuteIdempotently(ctx, s, "over", nil, over)
	if r.Outcome != consumer.Success || !r.ResultDropped {
		t.Fatalf("a result over the limit: %v %v, dropped %v; want SUCCESS, dropped", r.Outcome, r.Err, r.ResultDropped)
	}
	dup := consumer.ExecuteIdempotently(ctx, s, "over", nil, over)
	var tl *consumer.ResultTooLargeError
	if dup.Outcome != consumer.Duplicate || !errors.As(dup.Err, &tl) || tl.Size != MaxResult+2 || tl.Limit != MaxResult ||
		!strings.Contains(dup.Err.Error(), strconv.Itoa(MaxResult)+"-byte limit") {
		t.Fatalf("its duplicate: %v %v; want DUPLICATE, %d bytes over the %d-byte limit", dup.Outcome, dup.Err, MaxResult+2, MaxResult)
	}
	if runs != 1 {
		t.Fatalf("the handler ran %d times, want 1", runs)
	}

	// A lower limit of the user's is the one.
	low := mustStore(t, Config{ClockSkew: NoClockSkew}, consumer.WithMaxResultSize(1000))
	if got := low.Settings().MaxResultSize; got != 1000 {
		t.Fatalf("WithMaxResultSize(1000): Settings().MaxResultSize = %d", got)
	}
	big := func(ctx context.Context) (string, error) { return strings.Repeat("y", 2000), nil }
	if r := consumer.ExecuteIdempotently(ctx, low, "low", nil, big); r.Outcome != consumer.Success || !r.ResultDropped {
		t.Fatalf("over the user's limit: %v %v dropped %v", r.Outcome, r.Err, r.ResultDropped)
	}
	if dup := consumer.ExecuteIdempotently(ctx, low, "low", nil, big); !errors.As(dup.Err, &tl) || tl.Limit != 1000 {
		t.Fatalf("its duplicate: %v", dup.Err)
	}

	// A higher one is refused, naming both.
	for _, n := range []int{MaxResult + 1, consumer.DefaultMaxResultSize} {
		_, err := New(client(t), Config{}, consumer.WithMaxResultSize(n))
		if !errors.Is(err, consumer.ErrInvalidConfig) || !strings.Contains(err.Error(), strconv.Itoa(n)) ||
			!strings.Contains(err.Error(), strconv.Itoa(MaxResult)) {
			t.Fatalf("WithMaxResultSize(%d): %v; want ErrInvalidConfig naming %d and %d", n, err, n, MaxResult)
		}
	}
	if s, err := New(client(t), Config{}, consumer.WithMaxResultSize(MaxResult)); err != nil || s.Settings().MaxResultSize != MaxResult {
		t.Fatalf("WithMaxResultSize(MaxResult): %v", err)
	}
}

// TestLargestRecordFits: a result of MaxResult bytes is kept in the largest
// record there is: the longest key under the longest scope and prefix a store
// accepts. A longer prefix is refused at construction.
func TestLargestRecordFits(t *testing.T) {
	ctx := context.Background()
	scope := strings.Repeat("s", 128)
	p := prefix(t)
	p += strings.Repeat("p", maxPartitionKey-3-len(scope)-consumer.MaxKeyLen-len(p))
	s := mustStore(t, Config{ClockSkew: NoClockSkew}, consumer.WithScope(scope), consumer.WithPrefix(p))
	k := consumer.Key(strings.Repeat("k", consumer.MaxKeyLen))
	if n := len(s.RecordKey(k)); n != maxPartitionKey {
		t.Fatalf("the record key is %d bytes, want the largest, %d", n, maxPartitionKey)
	}
	want := strings.Repeat("z", MaxResult-2) // MaxResult bytes of JSON
	r := consumer.ExecuteIdempotently(ctx, s, k, []byte("payload"), func(ctx context.Context) (string, error) { return want, nil })
	if r.Outcome != consumer.Success || r.ResultDropped {
		t.Fatalf("%v %v dropped %v", r.Outcome, r.Err, r.ResultDropped)
	}
	dup := consumer.ExecuteIdempotently(ctx, s, k, []byte("payload"), func(ctx context.Context) (string, error) { return "", nil })
	if dup.Outcome != consumer.Duplicate || dup.Err != nil || dup.Value != want {
		t.Fatalf("duplicate: %v %v, %d bytes", dup.Outcome, dup.Err, len(dup.Value))
	}
	_, err := New(client(t), Config{}, consumer.WithScope(scope), consumer.WithPrefix(p+"p"))
	if !errors.Is(err, consumer.ErrInvalidConfig) || !strings.Contains(err.Error(), "WithPrefix") {
		t.Fatalf("a prefix one byte longer: %v; want ErrInvalidConfig naming WithPrefix", err)
	}
}
