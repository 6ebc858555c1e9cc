package consumer_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/uuid"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/store/memory"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
)

var charges = uuid.MustParse("b7f6c1a2-3d4e-4f50-8a61-9b2c3d4e5f60")

type Receipt struct {
	ChargeID string `json:"charge_id"`
}

func Example() {
	srv, _ := miniredis.Run() // or any Redis: redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	store, err := redisstore.NewStore(rdb, consumer.WithScope("payments"))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	key := consumer.NewKey(charges, "order", "42")
	charge := func(ctx context.Context) (Receipt, error) {
		info, _ := consumer.InfoFromContext(ctx)
		fmt.Println("charging, attempt", info.Attempt)
		return Receipt{ChargeID: "ch_42"}, nil
	}
	for delivery := 1; delivery <= 2; delivery++ {
		r := consumer.ExecuteIdempotently(ctx, store, key, []byte(`{"order":42}`), charge)
		fmt.Println(r.Outcome, r.Value.ChargeID, r.Action())
	}
	// Output:
	// charging, attempt 1
	// SUCCESS ch_42 ack
	// DUPLICATE ch_42 ack
}

func ExampleExecuteBatch() {
	store, _ := memory.NewStore()
	ctx := context.Background()
	items := []consumer.BatchItem{
		{Key: consumer.NewKey(charges, "1"), Payload: []byte("a")},
		{Key: consumer.NewKey(charges, "2"), Payload: []byte("b")},
		{Key: consumer.NewKey(charges, "1"), Payload: []byte("a")}, // delivered twice in one poll
	}
	results := consumer.ExecuteBatch(ctx, store, items, func(ctx context.Context, i int, it consumer.BatchItem) (string, error) {
		return "done " + string(it.Payload), nil
	})
	for _, r := range results {
		fmt.Println(r.Outcome, r.Value)
	}
	// Output:
	// SUCCESS done a
	// SUCCESS done b
	// DUPLICATE done a
}

func ExamplePermanent() {
	store, _ := memory.NewStore()
	ctx := context.Background()
	key := consumer.NewKey(charges, "declined")
	decline := func(ctx context.Context) (Receipt, error) {
		return Receipt{}, consumer.Permanent(errors.New("card declined"))
	}
	r := consumer.ExecuteIdempotently(ctx, store, key, nil, decline)
	fmt.Println(r.Outcome, errors.Is(r.Err, consumer.ErrPermanent), r.Action())
	r = consumer.ExecuteIdempotently(ctx, store, key, nil, decline)
	fmt.Println(r.Outcome, r.Err, r.Action())
	// Output:
	// ERROR true dead-letter
	// DUPLICATE card declined dead-letter
}

func ExampleNewKey() {
	ns := uuid.MustParse("b7f6c1a2-3d4e-4f50-8a61-9b2c3d4e5f60")
	fmt.Println(consumer.NewKey(ns, "ab", "c") == consumer.NewKey(ns, "a", "bc"))
	first, redelivered := consumer.NewKey(ns, "order", "42"), consumer.NewKey(ns, "order", "42")
	fmt.Println(first == redelivered)
	k, err := consumer.ParseKey("7c3a9e4e-header-value")
	fmt.Println(k, err)
	// Output:
	// false
	// true
	// 7c3a9e4e-header-value <nil>
}
