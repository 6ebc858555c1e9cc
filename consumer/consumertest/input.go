package consumertest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
)

// Bad input and bad options.

func testBadInput(t *testing.T, f Factory) {
	s := must(t, f)
	ctx := context.Background()
	fn := func(ctx context.Context) (int, error) { t.Fatal("handler ran on bad input"); return 0, nil }
	for name, k := range map[string]consumer.Key{
		"empty":    "",
		"too long": consumer.Key(strings.Repeat("k", consumer.MaxKeyLen+1)),
		"not utf8": consumer.Key("\xff\xfe"),
	} {
		r := consumer.ExecuteIdempotently(ctx, s, k, nil, fn)
		if r.Outcome != consumer.Error || !errors.Is(r.Err, consumer.ErrInvalidKey) || r.Action() != consumer.DeadLetter {
			t.Fatalf("%s key: %v %v %v", name, r.Outcome, r.Err, r.Action())
		}
	}
	if _, err := consumer.ParseKey(strings.Repeat("k", consumer.MaxKeyLen+1)); !errors.Is(err, consumer.ErrInvalidKey) {
		t.Fatalf("ParseKey of an over-long key: %v", err)
	}
	r := consumer.ExecuteIdempotently[int](ctx, s, key("nil-handler"), nil, nil)
	expect(t, r, consumer.Error, consumer.ErrNilHandler)
	r = consumer.ExecuteIdempotently(ctx, nil, key("nil-store"), nil, fn)
	expect(t, r, consumer.Error, consumer.ErrInvalidConfig)
	batch := consumer.ExecuteBatch(ctx, s, []consumer.BatchItem{{Key: key("b")}},
		func(ctx context.Context, i int, it consumer.BatchItem) (int, error) { return 0, nil }, consumer.WithConcurrency(0))
	expect(t, batch[0], consumer.Error, consumer.ErrInvalidConfig)
}

func testInvalidOptions(t *testing.T, f Factory) {
	for _, tc := range []struct {
		name string
		opt  consumer.Option
		hint string
	}{
		{"lease too short", consumer.WithLease(time.Millisecond), "WithLease"},
		{"retention too short", consumer.WithRetention(time.Millisecond), "WithRetention"},
		{"zero attempts", consumer.WithMaxAttempts(0), "WithMaxAttempts"},
		{"empty scope", consumer.WithScope(""), "WithScope"},
		{"scope with brace", consumer.WithScope("a{b"), "hash tag"},
		{"prefix with brace", consumer.WithPrefix("x}"), "hash tag"},
		{"result size", consumer.WithMaxResultSize(0), "WithMaxResultSize"},
		{"nil codec", consumer.WithCodec(nil), "WithCodec"},
		{"negative wait", consumer.WithWaitInProgress(-time.Second), "WithWaitInProgress"},
	} {
		_, err := f(t, tc.opt)
		if !errors.Is(err, consumer.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.hint) {
			t.Errorf("%s: err = %v, want ErrInvalidConfig mentioning %q", tc.name, err, tc.hint)
		}
	}
}
