package kafka_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/kafka"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestMain(m *testing.M) {
	if helperMain() {
		return
	}
	testenv.Run(m)
}

type event struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

// produce publishes events, each with its id as Idempotency-Key and as record key;
// dupShare of them a second time, shuffled in among the rest.
func produce(t *testing.T, brokers []string, topic string, n int, dupShare float64) []event {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	events := make([]event, n)
	for i := range events {
		events[i] = event{ID: fmt.Sprintf("evt-%05d", i), Amount: 100 + i%900}
	}
	stream := append([]event(nil), events...)
	stream = append(stream, events[:int(float64(n)*dupShare)]...)
	rand.Shuffle(len(stream), func(i, j int) { stream[i], stream[j] = stream[j], stream[i] })
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for _, ev := range stream {
		body, _ := json.Marshal(ev)
		wg.Add(1)
		cl.Produce(context.Background(), &kgo.Record{Key: []byte(ev.ID), Value: body,
			Headers: []kgo.RecordHeader{{Key: kafka.DefaultKeyHeader, Value: []byte(ev.ID)}}},
			func(_ *kgo.Record, err error) {
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
				}
				wg.Done()
			})
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	return events
}

// produceRaw publishes recs to the partitions they name.
func produceRaw(t *testing.T, brokers []string, recs ...*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// lag returns, per partition of topic, end offset minus the group's committed offset.
func lag(t *testing.T, brokers []string, group, topic string) (total int64, perPart map[int32]int64) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		t.Fatal(err)
	}
	perPart = make(map[int32]int64)
	ends.Each(func(o kadm.ListedOffset) {
		c, ok := committed.Lookup(topic, o.Partition)
		at := int64(0)
		if ok {
			at = c.At
		}
		perPart[o.Partition] = o.Offset - at
		total += o.Offset - at
	})
	return total, perPart
}

// dlqRecords reads every record of a dead-letter topic.
func dlqRecords(t *testing.T, brokers []string, topic string) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	var want int64
	ends.Each(func(o kadm.ListedOffset) { want += o.Offset })
	var out []*kgo.Record
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for int64(len(out)) < want {
		f := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d dead-letter records", len(out), want)
		}
		out = append(out, f.Records()...)
	}
	return out
}

func header(rec *kgo.Record, key string) string {
	for _, h := range rec.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// member runs one group member until stop is called.
type member struct {
	cancel context.CancelFunc
	done   chan error
}

func startMember[V, T any](t *testing.T, c *kafka.Consumer[V, T]) *member {
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{cancel: cancel, done: make(chan error, 1)}
	go func() { m.done <- c.Run(ctx) }()
	t.Cleanup(m.stop)
	return m
}

func (m *member) stop() {
	m.cancel()
	<-m.done
	m.done <- nil // later stops return at once
}

func decodeEvent(rec *kgo.Record) (event, error) {
	var ev event
	err := json.Unmarshal(rec.Value, &ev)
	if err == nil && ev.ID == "" {
		err = fmt.Errorf("event without id")
	}
	return ev, err
}

func groupOpts(brokers []string, group string, topics ...string) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.HeartbeatInterval(250 * time.Millisecond), // members hear of a rebalance within a quarter second
	}
}

// topicID returns the ID of topic (newer Produce requests name topics by ID).
func topicID(t *testing.T, brokers []string, topic string) [16]byte {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	td, err := kadm.NewClient(cl).ListTopics(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	return td[topic].ID
}
