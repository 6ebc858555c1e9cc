package postgres_test

import (
	"context"
	"errors"
	"log"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/store/postgres"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// A handler whose effect is a row in PostgreSQL records its key's completion in
// the same transaction: a crash at any point leaves both or neither.
func ExampleInTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := postgres.Migrate(ctx, pool); err != nil { // once, at start-up
		log.Fatal(err)
	}
	store, err := postgres.NewStore(pool, consumer.WithScope("payments")) // or redisstore.NewStore
	if err != nil {
		log.Fatal(err)
	}
	charge := func(ctx context.Context) (string, error) {
		return postgres.InTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) (string, error) {
			_, err := tx.Exec(ctx, `INSERT INTO charges (order_id, amount) VALUES ($1, $2)`, "order-42", 1999)
			return "ch_order-42", err
		})
	}
	r := consumer.ExecuteIdempotently(ctx, store, "order-42", nil, charge)
	log.Println(r.Outcome, r.Value)
}

// A service that calls InTx, with its migrations run by its own tool, refuses to
// start (or reports not ready) until idemkit's table is there.
func ExampleCheck() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := postgres.Check(ctx, pool); errors.Is(err, postgres.ErrNotMigrated) {
		log.Fatal(err) // names the table and says to run postgres.Migrate
	} else if err != nil {
		log.Print(err) // the database is unreachable: not ready yet
	}
}

// Claims in Redis, effects in PostgreSQL: the Redis store finds the completions
// InTx commits, so that a key whose last attempt committed and then died is a
// duplicate with its result, not a dead letter.
func ExampleCompletions() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := redisstore.NewStore(redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}),
		consumer.WithScope("payments"), consumer.WithCompletions(postgres.Completions(pool)))
	if err != nil {
		log.Fatal(err)
	}
	_ = store // given to ExecuteIdempotently or an adapter, with handlers that call postgres.InTx
}
