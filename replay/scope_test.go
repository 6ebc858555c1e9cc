package replay_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/replay"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// defaultScopeStore is a Redis store left on the default scope, holding one
// failed key, "order-1", as a service would have recorded it.
func defaultScopeStore(t *testing.T) *redisstore.Store {
	t.Helper()
	store, err := redisstore.NewStore(testenv.Redis(t), consumer.WithPrefix(testenv.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	r := consumer.ExecuteIdempotently(context.Background(), store, "order-1", body("order-1"), func(context.Context) (string, error) {
		return "", consumer.Permanent(errors.New("card expired"))
	})
	if !errors.Is(r.Err, consumer.ErrPermanent) {
		t.Fatalf("the failed record: %v %v", r.Outcome, r.Err)
	}
	return store
}

// expectDefaultScopeRefused checks err is the one refusal every shared entry point
// gives, and that order-1's record is as the service left it.
func expectDefaultScopeRefused(t *testing.T, what string, err error, store *redisstore.Store) {
	t.Helper()
	if !errors.Is(err, consumer.ErrDefaultScope) || !errors.Is(err, replay.ErrConfig) || !strings.Contains(err.Error(), "consumer.WithScope(") {
		t.Fatalf("%s on the default scope: %v", what, err)
	}
	rec, perr := store.Peek(context.Background(), "order-1")
	if perr != nil || rec.State != "failed" || rec.Fence != 1 || rec.Attempts != 1 {
		t.Fatalf("%s changed the record: %+v, %v", what, rec, perr)
	}
}

// Replay and redrive run handlers or change records for whichever services share a
// stream of messages: each refuses a store on the default scope before it reads,
// runs, reruns or republishes anything. Plan only reads, and says which scope.
func TestSharedEntryPointsRefuseTheDefaultScope(t *testing.T) {
	ctx := context.Background()
	store := defaultScopeStore(t)
	lines := writeJSONL(t, `{"key":"order-1","payload":{"order":"order-1"}}`, `{"key":"order-2","payload":"x"}`)

	runs := 0
	_, err := replay.Execute(ctx, store, openJSONL(t, lines), func(context.Context, replay.Message) (int, error) { runs++; return 0, nil })
	expectDefaultScopeRefused(t, "Execute", err, store)
	if rec, _ := store.Peek(ctx, "order-2"); runs != 0 || rec.State != "" {
		t.Fatalf("Execute on the default scope: %d handler runs, order-2 %q", runs, rec.State)
	}

	plan, err := replay.Plan(ctx, store, openJSONL(t, lines))
	if err != nil || plan.Scope != consumer.DefaultScope || plan.Counts[replay.Failed] != 1 || plan.Counts[replay.Unseen] != 1 {
		t.Fatalf("plan on the default scope: %+v, %v", plan, err)
	}

	t.Run("kafka", func(t *testing.T) {
		brokers, _ := testenv.Kafka(t, 1, "orders", "orders.dlq")
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		dl := &kgo.Record{Topic: "orders.dlq", Key: []byte("order-1"), Value: body("order-1"), Headers: []kgo.RecordHeader{
			{Key: "idemkit-original-topic", Value: []byte("orders")}, {Key: "idemkit-key", Value: []byte("order-1")},
			{Key: "idemkit-kind", Value: []byte("PERMANENT")}}}
		if err := cl.ProduceSync(ctx, dl).FirstErr(); err != nil {
			t.Fatal(err)
		}
		src, err := replay.OpenKafka(ctx, []kgo.Opt{kgo.SeedBrokers(brokers...)}, replay.KafkaRange{Topic: "orders.dlq"}, replay.KeyHeader("idemkit-key"))
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		rep, err := replay.RedriveKafka(ctx, store, src, cl, replay.RedriveOptions{Rerun: true, Execute: true, Actor: "alice", Reason: "fixed"})
		expectDefaultScopeRefused(t, "RedriveKafka", err, store)
		ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		if end, _ := ends.Lookup("orders", 0); end.Offset != 0 || rep.Read != 0 {
			t.Fatalf("RedriveKafka on the default scope republished: end offset %d, %+v", end.Offset, rep)
		}
	})

	t.Run("rabbitmq", func(t *testing.T) {
		r := newRabbit(t)
		q, dlq := r.queue("orders"), r.queue("orders.dlq")
		r.deadLetter(dlq, q, "order-1", nil)
		r.depth(dlq, 1)
		src, err := replay.OpenRabbitMQ(r.conn, dlq)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := replay.RedriveRabbitMQ(ctx, store, src, r.conn, replay.RedriveOptions{Rerun: true, Execute: true, Actor: "alice", Reason: "fixed"})
		_ = src.Close()
		expectDefaultScopeRefused(t, "RedriveRabbitMQ", err, store)
		if rep.Read != 0 {
			t.Fatalf("RedriveRabbitMQ on the default scope read %+v", rep)
		}
		r.depth(dlq, 1)
		r.depth(q, 0)
	})
}
