package kafkashare_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/kafkashare"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/store/memory"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Bad configurations are refused with an error that names the fix; none panics.
func TestBadConfigurationIsRefused(t *testing.T) {
	scoped, err := memory.NewStore(consumer.WithScope("payments"))
	if err != nil {
		t.Fatal(err)
	}
	unscoped, err := memory.NewStore()
	if err != nil {
		t.Fatal(err)
	}
	h := func(context.Context, *kgo.Record) (int, error) { return 0, nil }
	good := []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1"), kgo.ShareGroup("g"), kgo.ConsumeTopics("payments")}
	for _, c := range []struct {
		name  string
		store consumer.Store
		opts  []kgo.Opt
		h     func(context.Context, *kgo.Record) (int, error)
		with  []kafkashare.Option
		want  string
	}{
		{"nil store", nil, good, h, nil, "nil store"},
		{"nil handler", scoped, good, nil, nil, "nil handler"},
		{"default scope", unscoped, good, h, nil, "scope"},
		{"no share group", scoped, []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1"), kgo.ConsumeTopics("payments")}, h, nil, "kgo.ShareGroup"},
		{"no topics", scoped, []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1"), kgo.ShareGroup("g")}, h, nil, "kgo.ConsumeTopics"},
		{"regex", scoped, append(good, kgo.ConsumeRegex()), h, nil, "kgo.ConsumeRegex"},
		{"dead-letter topic consumed", scoped, good, h,
			[]kafkashare.Option{kafkashare.WithDeadLetterTopic(func(string) string { return "payments" })}, "WithDeadLetterTopic"},
		{"nil option", scoped, good, h, []kafkashare.Option{nil}, "nil option"},
		{"clients", scoped, good, h, []kafkashare.Option{kafkashare.WithClients(0)}, "WithClients(0)"},
		{"max poll", scoped, good, h, []kafkashare.Option{kafkashare.WithMaxPollRecords(0)}, "WithMaxPollRecords(0)"},
		{"concurrency", scoped, good, h, []kafkashare.Option{kafkashare.WithConcurrency(0)}, "WithConcurrency(0)"},
		{"backoff", scoped, good, h, []kafkashare.Option{kafkashare.WithBackoff(time.Second, time.Millisecond)}, "WithBackoff"},
		{"margin", scoped, good, h, []kafkashare.Option{kafkashare.WithAcquisitionMargin(0)}, "WithAcquisitionMargin"},
		{"delivery limit", scoped, good, h, []kafkashare.Option{kafkashare.WithDeliveryLimit(1)}, "WithDeliveryLimit(1)"},
		{"busy hold", scoped, good, h, []kafkashare.Option{kafkashare.WithBusyHold(0)}, "WithBusyHold"},
		{"value key type", scoped, good, h, []kafkashare.Option{kafkashare.WithValueKey(func(string) (consumer.Key, error) { return "", nil })}, "WithValueKey"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := kafkashare.New(c.store, c.opts, c.h, c.with...)
			if !errors.Is(err, kafkashare.ErrConfig) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v; want ErrConfig naming %q", err, c.want)
			}
		})
	}
}

// Run refuses to take a record while a consumed topic's dead-letter topic is
// missing, and names it.
func TestMissingDeadLetterTopicRefusesToStart(t *testing.T) {
	brokers := shareCluster(t, 1, "payments")
	store, err := memory.NewStore(consumer.WithScope("payments"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := kafkashare.New(store, shareOpts(brokers, "billing", "payments"),
		func(context.Context, *kgo.Record) (int, error) { return 0, nil })
	if err != nil {
		t.Fatal(err)
	}
	err = c.Run(context.Background())
	if !errors.Is(err, kafkashare.ErrNoDeadLetterTopic) || !strings.Contains(err.Error(), `"payments.dlq"`) {
		t.Fatalf("Run: %v; want ErrNoDeadLetterTopic naming payments.dlq", err)
	}
}
