package kafkashare_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/kafkashare"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestMain(m *testing.M) {
	if helperMain() {
		return
	}
	testenv.Run(m)
}

// lockMS is the share groups' acquisition lock in these tests: short, so a
// stopped member's records come back within the test.
const lockMS = 3000

// shareCluster starts an in-process kfake cluster with share groups: the lock
// above, expired locks swept every 100ms (kfake's default is 5s), the default
// delivery limit of 5, and the topics created with partitions each.
func shareCluster(t *testing.T, partitions int32, topics ...string) []string {
	t.Helper()
	brokers, _ := shareKfake(t, partitions, topics...)
	return brokers
}

// shareKfake is shareCluster, with the cluster for fault injection.
func shareKfake(t *testing.T, partitions int32, topics ...string) ([]string, *kfake.Cluster) {
	t.Helper()
	return shareKfakeLimit(t, 5, partitions, topics...)
}

// shareKfakeLimit is shareKfake with another delivery limit (kfake takes it from
// the broker's config only, not from the group's).
func shareKfakeLimit(t *testing.T, limit int, partitions int32, topics ...string) ([]string, *kfake.Cluster) {
	t.Helper()
	return shareKfakeLock(t, lockMS, limit, partitions, topics...)
}

// shareKfakeLock is shareKfakeLimit with another acquisition lock, in
// milliseconds.
func shareKfakeLock(t *testing.T, lock, limit int, partitions int32, topics ...string) ([]string, *kfake.Cluster) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topics...),
		kfake.BrokerConfigs(map[string]string{
			"group.share.record.lock.duration.ms": strconv.Itoa(lock),
			"share.record.lock.sweep.interval.ms": "100",
			"group.share.delivery.count.limit":    strconv.Itoa(limit),
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs(), c
}

// startAtEarliest makes group read from the start of its topics.
func startAtEarliest(t *testing.T, brokers []string, group string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := kafkashare.SetGroupConfigs(context.Background(), cl, group,
		map[string]string{"share.auto.offset.reset": "earliest"}); err != nil {
		t.Fatal(err)
	}
}

type event struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

func decodeEvent(rec *kgo.Record) (event, error) {
	var ev event
	err := json.Unmarshal(rec.Value, &ev)
	if err == nil && ev.ID == "" {
		err = fmt.Errorf("event without id")
	}
	return ev, err
}

// produce publishes n events, each with its id as Idempotency-Key; dupShare of
// them a second time, shuffled in among the rest, spread over the partitions.
func produce(t *testing.T, brokers []string, topic string, n int, dupShare float64) []event {
	t.Helper()
	events := make([]event, n)
	for i := range events {
		events[i] = event{ID: fmt.Sprintf("evt-%05d", i), Amount: 100 + i%900}
	}
	stream := append([]event(nil), events...)
	stream = append(stream, events[:int(float64(n)*dupShare)]...)
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(stream), func(i, j int) { stream[i], stream[j] = stream[j], stream[i] })
	recs := make([]*kgo.Record, len(stream))
	for i, ev := range stream {
		v, _ := json.Marshal(ev)
		recs[i] = &kgo.Record{Topic: topic, Key: []byte(strconv.Itoa(i)), Value: v,
			Headers: []kgo.RecordHeader{{Key: kafkashare.DefaultKeyHeader, Value: []byte(ev.ID)}}}
	}
	produceRaw(t, brokers, recs...)
	return events
}

func produceRaw(t *testing.T, brokers []string, recs ...*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func shareOpts(brokers []string, group string, topics ...string) []kgo.Opt {
	return []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ShareGroup(group), kgo.ConsumeTopics(topics...)}
}

// unfinished returns how many records of topic the share group has not finished
// (acknowledged or archived): the end offsets minus the group's share-partition
// start offsets. 0 means nothing is left acquired or available.
func unfinished(t *testing.T, brokers []string, group, topic string, partitions int32) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	g := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
	g.GroupID = group
	gt := kmsg.NewDescribeShareGroupOffsetsRequestGroupTopic()
	gt.Topic = topic
	for p := range partitions {
		gt.Partitions = append(gt.Partitions, p)
	}
	g.Topics = append(g.Topics, gt)
	req.Groups = append(req.Groups, g)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	start := map[int32]int64{}
	for _, rg := range resp.Groups {
		for _, rt := range rg.Topics {
			for _, rp := range rt.Partitions {
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					t.Fatalf("describe share offsets: %v", err)
				}
				start[rp.Partition] = rp.StartOffset
			}
		}
	}
	lreq := kmsg.NewPtrListOffsetsRequest()
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = topic
	for p := range partitions {
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Partition, lp.Timestamp = p, -1
		lt.Partitions = append(lt.Partitions, lp)
	}
	lreq.Topics = append(lreq.Topics, lt)
	lresp, err := lreq.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	var left int64
	for _, rt := range lresp.Topics {
		for _, rp := range rt.Partitions {
			s := start[rp.Partition]
			if s < 0 {
				s = 0
			}
			left += rp.Offset - s
		}
	}
	return left
}

// deadLetters reads every record of topic (from the start).
func deadLetters(t *testing.T, brokers []string, topic string, want int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("%d dead letters in %s", want, topic), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		out = append(out, cl.PollFetches(ctx).Records()...)
		return len(out) >= want
	})
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

// actions records the share actions and broker answers the adapter reports.
type actions struct {
	mu       sync.Mutex
	byReason map[string]int
	maxCount map[int64]int32 // per offset (one partition tests): the highest delivery count acknowledged
	ackErrs  int
	ackOK    int
	near     int
	dead     int
	// the delivery counts the engine's handler events carried, in order of start
	handlerCounts []int32
	outcomeCounts []int32                       // the delivery counts the engine's outcome events carried
	outcomes      map[string]int                // the engine's outcome events, by outcome/kind
	terminal      []kafkashare.ShareActionEvent // every acknowledgement but renewals, in order
	nearEvents    []kafkashare.ShareActionEvent // DeliveryLimitHook's, in order
}

func newActions() *actions {
	return &actions{byReason: map[string]int{}, maxCount: map[int64]int32{}, outcomes: map[string]int{}}
}

func (a *actions) OnShareAction(e kafkashare.ShareActionEvent) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.byReason[e.Status.String()+"/"+e.Reason]++
	if e.Status != kgo.AckRenew {
		a.terminal = append(a.terminal, e)
	}
	if e.DeliveryCount > a.maxCount[e.Offset] {
		a.maxCount[e.Offset] = e.DeliveryCount
	}
}

func (a *actions) OnShareAck(e kafkashare.ShareAckEvent) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if e.Err != nil {
		a.ackErrs++
	} else {
		a.ackOK++
	}
}

func (a *actions) OnDeliveryLimitNear(e kafkashare.ShareActionEvent) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.near++
	a.nearEvents = append(a.nearEvents, e)
}

func (a *actions) OnHandlerStart(e consumer.HandlerEvent) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.handlerCounts = append(a.handlerCounts, e.DeliveryCount)
}

func (a *actions) OnHandlerEnd(consumer.HandlerEvent) {}

func (a *actions) OnOutcome(e consumer.OutcomeEvent) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.outcomeCounts = append(a.outcomeCounts, e.DeliveryCount)
	a.outcomes[e.Outcome.String()+"/"+e.Kind]++
}

func (a *actions) OnDeadLetter(consumer.DeadLetterEvent) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.dead++
}

// answers returns the broker's refused and applied acknowledgement answers.
func (a *actions) answers() (refused, applied int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ackErrs, a.ackOK
}

func (a *actions) get(key string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.byReason[key]
}

// run starts c and stops it when t ends, failing t if Run fails.
func run[V, T any](t *testing.T, c *kafkashare.Consumer[V, T]) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}
