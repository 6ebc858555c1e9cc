// Command payments-postgres is a Kafka payments consumer whose handler writes the
// charge to PostgreSQL, exactly once under kill -9: the charge row and the key's
// completion commit in one transaction (store/postgres.InTx), with Redis doing the
// claims and leases.
//
//	go run ./examples/payments-postgres           # transactional completion
//	go run ./examples/payments-postgres -plain    # the same without it
//
// It publishes 2,000 payment events (a fifth of them twice) to an in-process Kafka
// (kfake), starts a member process, kills it with SIGKILL once it has charged 500
// payments, starts another member, and counts the rows: with InTx every payment
// has exactly one row whatever the moment of the kill; with -plain (a plain
// transaction, completion recorded after the commit) a kill between the commit and
// the completion charges some payments twice. PostgreSQL: IDEMKIT_POSTGRES_DSN, or
// postgres://postgres@127.0.0.1:5432/test (the example works in a schema of its
// own and drops it); Redis: IDEMKIT_REDIS_ADDR, or a private redis-server.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/idemkit/idemkit/adapters/kafka"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/store/postgres"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

type payment struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

func main() {
	events := flag.Int("events", 2000, "payment events")
	killAt := flag.Int("kill-at", 500, "charges after which the first member is killed")
	plain := flag.Bool("plain", false, "commit the charge in a plain transaction, without transactional completion")
	flag.Parse()
	var err error
	if os.Getenv("PAYMENTS_MEMBER") != "" {
		err = member(os.Getenv("PAYMENTS_BROKERS"), os.Getenv("PAYMENTS_REDIS"), os.Getenv("PAYMENTS_SCHEMA"), *plain)
	} else {
		err = run(*events, *killAt, *plain)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "payments-postgres:", err)
		os.Exit(1)
	}
}

func dsn() string {
	if d := os.Getenv("IDEMKIT_POSTGRES_DSN"); d != "" {
		return d
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// redisServer returns the Redis the members share: IDEMKIT_REDIS_ADDR, or a
// private redis-server (from PATH) on a free port, stopped by stop.
func redisServer() (addr string, stop func(), err error) {
	if a := os.Getenv("IDEMKIT_REDIS_ADDR"); a != "" {
		return a, func() {}, nil
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, fmt.Errorf("no Redis: set IDEMKIT_REDIS_ADDR or install redis-server: %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr = l.Addr().String()
	_ = l.Close()
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop = func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			_ = c.Close()
			return addr, stop, nil
		}
	}
	stop()
	return "", nil, fmt.Errorf("redis-server did not start on %s", addr)
}

func pool(ctx context.Context, schema string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn())
	if err != nil {
		return nil, err
	}
	if schema != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// charge writes the charge row of p in tx.
func charge(ctx context.Context, tx pgx.Tx, p payment) (string, error) {
	_, err := tx.Exec(ctx, `INSERT INTO charges (payment_id, amount) VALUES ($1, $2)`, p.ID, p.Amount)
	return "ch_" + p.ID, err
}

// pay is the handler: the charge row and the key's completion commit in one
// transaction (InTx), or, with plain, the row commits first and idemkit records
// the completion afterwards, in Redis.
func pay(ctx context.Context, db *pgxpool.Pool, p payment, plain bool) (string, error) {
	if plain {
		tx, err := db.Begin(ctx)
		if err != nil {
			return "", err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		v, err := charge(ctx, tx, p)
		if err != nil {
			return "", err
		}
		return v, tx.Commit(ctx)
	}
	return postgres.InTx(ctx, db, func(ctx context.Context, tx pgx.Tx) (string, error) { return charge(ctx, tx, p) })
}

// member charges payments until SIGTERM.
func member(brokers, redisAddr, schema string, plain bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	db, err := pool(ctx, schema)
	if err != nil {
		return err
	}
	defer db.Close()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	store, err := redisstore.NewStore(rdb, consumer.WithScope("payments"), consumer.WithLease(2*time.Second),
		consumer.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return err
	}
	handler := func(ctx context.Context, p payment, _ *kgo.Record) (string, error) { return pay(ctx, db, p, plain) }
	c, err := kafka.NewTyped(store, []kgo.Opt{kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.ConsumerGroup("billing"),
		kgo.ConsumeTopics("payments"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(time.Second), kgo.HeartbeatInterval(200 * time.Millisecond)},
		func(rec *kgo.Record) (payment, error) {
			var p payment
			return p, json.Unmarshal(rec.Value, &p)
		}, handler, kafka.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

func run(events, killAt int, plain bool) error {
	ctx := context.Background()
	schema := "payments_example_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	admin, err := pool(ctx, "")
	if err != nil {
		return err
	}
	defer admin.Close()
	if _, err := admin.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		return fmt.Errorf("PostgreSQL at %s: %w (set IDEMKIT_POSTGRES_DSN)", dsn(), err)
	}
	defer admin.Exec(context.WithoutCancel(ctx), `DROP SCHEMA `+schema+` CASCADE`)
	db, err := pool(ctx, schema)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := postgres.Migrate(ctx, db); err != nil {
		return err
	}
	if _, err := db.Exec(ctx, `CREATE TABLE charges (payment_id text NOT NULL, amount int NOT NULL)`); err != nil {
		return err
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(8, "payments", "payments.dlq"),
		kfake.GroupMinSessionTimeout(500*time.Millisecond))
	if err != nil {
		return err
	}
	defer cluster.Close()
	brokers := strings.Join(cluster.ListenAddrs(), ",")
	redisAddr, stopRedis, err := redisServer()
	if err != nil {
		return err
	}
	defer stopRedis()
	published, err := publish(ctx, cluster.ListenAddrs(), events)
	if err != nil {
		return err
	}

	start := func() (*exec.Cmd, error) {
		args := []string{}
		if plain {
			args = append(args, "-plain")
		}
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), "PAYMENTS_MEMBER=1", "PAYMENTS_BROKERS="+brokers, "PAYMENTS_REDIS="+redisAddr, "PAYMENTS_SCHEMA="+schema)
		cmd.Stderr = os.Stderr
		return cmd, cmd.Start()
	}
	count := func() (rows, distinct int) {
		_ = db.QueryRow(ctx, `SELECT count(*), count(DISTINCT payment_id) FROM charges`).Scan(&rows, &distinct)
		return rows, distinct
	}
	began := time.Now()
	first, err := start()
	if err != nil {
		return err
	}
	for rows, _ := count(); rows < killAt; rows, _ = count() {
		if time.Since(began) > time.Minute {
			_ = first.Process.Kill()
			return errors.New("the first member never charged enough payments")
		}
		time.Sleep(5 * time.Millisecond)
	}
	_ = first.Process.Signal(syscall.SIGKILL) // kill -9, wherever it is
	_ = first.Wait()
	killedAt, _ := count()
	second, err := start()
	if err != nil {
		return err
	}
	defer func() { _ = second.Process.Signal(syscall.SIGTERM); _ = second.Wait() }()
	for lag(ctx, cluster.ListenAddrs()) != 0 {
		if time.Since(began) > 2*time.Minute {
			return errors.New("the second member did not finish")
		}
		time.Sleep(20 * time.Millisecond)
	}
	rows, distinct := count()
	mode := "transactional completion (store/postgres.InTx)"
	if plain {
		mode = "plain transaction, completion recorded after the commit (-plain)"
	}
	fmt.Printf("idemkit payments-postgres: %s\n", mode)
	fmt.Printf("  events published (a fifth twice)     %6d\n", published)
	fmt.Printf("  payments                             %6d\n", events)
	fmt.Printf("  rows when the first member was killed %5d\n", killedAt)
	fmt.Printf("  charge rows                          %6d\n", rows)
	fmt.Printf("  payments charged                     %6d\n", distinct)
	fmt.Printf("  payments charged twice or more       %6d\n", rows-distinct)
	fmt.Printf("  done in %v\n", time.Since(began).Round(time.Millisecond))
	if rows != events || distinct != events {
		return fmt.Errorf("%d rows for %d payments (%d charged): not exactly once", rows, events, distinct)
	}
	fmt.Println("  every payment charged exactly once")
	return nil
}

func publish(ctx context.Context, brokers []string, n int) (int, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("payments"))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	var recs []*kgo.Record
	for i := range n {
		id := fmt.Sprintf("pay-%05d", i)
		body, _ := json.Marshal(payment{ID: id, Amount: 100 + i%900})
		for range 1 + btoi(i%5 == 0) {
			recs = append(recs, &kgo.Record{Key: []byte(id), Value: body,
				Headers: []kgo.RecordHeader{{Key: kafka.DefaultKeyHeader, Value: []byte(id)}}})
		}
	}
	return len(recs), cl.ProduceSync(ctx, recs...).FirstErr()
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func lag(ctx context.Context, brokers []string) int64 {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return -1
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, "payments")
	if err != nil {
		return -1
	}
	committed, err := adm.FetchOffsets(ctx, "billing")
	if err != nil {
		return -1
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) {
		at := int64(0)
		if c, ok := committed.Lookup("payments", o.Partition); ok {
			at = c.At
		}
		total += o.Offset - at
	})
	return total
}
