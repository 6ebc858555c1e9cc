package kafkashare

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/kafkaconf"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// coordinatesNS is the namespace of keys derived from a record's coordinates.
var coordinatesNS = uuid.MustParse("6f1c2a9e-3b7d-4c55-8e21-9a4d0c7b5e13")

// ErrNoDeadLetterTopic is matched by Run's error when a consumed topic's
// dead-letter topic does not exist.
var ErrNoDeadLetterTopic = errors.New("kafkashare: dead-letter topic missing")

// Consumer runs share-group members through the idempotent handler. Create it
// with New or NewTyped, run it with Run.
type Consumer[V, T any] struct {
	store   consumer.Store
	s       consumer.Settings
	decode  func(*kgo.Record) (V, error)
	handle  func(ctx context.Context, v V, rec *kgo.Record) (T, error)
	cfg     config
	log     *slog.Logger
	group   string
	topics  []string
	clients []*kgo.Client

	running atomic.Bool
	pipe    *consumer.Pipeline[T]
	run     func(context.Context) (T, error) // runHeld, the Run of every record

	stop chan struct{} // closed when Run's context ends: holds give up

	mu     sync.Mutex
	ackErr map[topicPartition]time.Time // when the broker last refused acks of a partition
}

type topicPartition struct {
	topic string
	part  int32
}

// New returns a consumer that runs handler on every record the share group that
// clientOpts describe (kgo.SeedBrokers, kgo.ShareGroup, kgo.ConsumeTopics, TLS,
// SASL...) delivers to it. The adapter adds kgo.ShareMaxRecords,
// kgo.ShareMaxRecordsStrict and kgo.ShareAckCallback; it refuses options without
// kgo.ShareGroup or topics, with kgo.ConsumeRegex, and a store on the default scope.
func New[T any](store consumer.Store, clientOpts []kgo.Opt, handler func(ctx context.Context, rec *kgo.Record) (T, error),
	opts ...Option) (*Consumer[*kgo.Record, T], error) {
	decode, handle := kafkaconf.Plain(handler)
	return NewTyped(store, clientOpts, decode, handle, opts...)
}

// NewTyped is New with a decode step: decode turns each record's value into a V
// before its key is taken; a record it cannot decode is dead-lettered as
// UNDECODABLE and never reaches handler.
func NewTyped[V, T any](store consumer.Store, clientOpts []kgo.Opt, decode func(*kgo.Record) (V, error),
	handler func(ctx context.Context, v V, rec *kgo.Record) (T, error), opts ...Option) (*Consumer[V, T], error) {
	cfg := defaults()
	if err := kafkaconf.Apply(&cfg, opts, Option.apply, configError); err != nil {
		return nil, err
	}
	if err := kafkaconf.Check(store, decode, handler, cfg.Shared, configError); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s, log, err := kafkaconf.Settings(store, cfg.Shared, configError)
	if err != nil {
		return nil, err
	}
	c := &Consumer[V, T]{store: store, s: s, decode: decode, handle: handler, cfg: cfg, log: log,
		stop: make(chan struct{}), ackErr: make(map[topicPartition]time.Time)}
	c.run = c.runHeld
	// A share fetch that finds nothing available (every record acquired by other
	// members) is held by the broker for up to FetchMaxWait; kgo's 5s default
	// would idle the member that long after the others release records. The
	// user's own FetchMaxWait wins.
	all := append([]kgo.Opt{kgo.FetchMaxWait(250 * time.Millisecond)}, clientOpts...)
	all = append(all,
		kgo.ShareMaxRecords(int32(cfg.maxPoll)), kgo.ShareMaxRecordsStrict(), kgo.ShareAckCallback(c.onAcks))
	for i := range cfg.clients {
		cl, err := kgo.NewClient(all...)
		if err != nil {
			c.closeClients()
			return nil, diagnose(clientOpts, err)
		}
		c.clients = append(c.clients, cl)
		if i == 0 {
			// Checked on the first client, before any other joins the group.
			if err := c.check(cl); err != nil {
				c.closeClients()
				return nil, err
			}
		}
	}
	return c, nil
}

// check reads the group and topics from a client's options and refuses what the
// adapter cannot run.
func (c *Consumer[V, T]) check(probe *kgo.Client) error {
	c.group, _ = probe.OptValue(kgo.ShareGroup).(string)
	c.topics, _ = probe.OptValue(kgo.ConsumeTopics).([]string)
	regex, _ := probe.OptValue(kgo.ConsumeRegex).(bool)
	switch {
	case c.group == "":
		return configError("no share group: add kgo.ShareGroup(name) (for a classic consumer group use adapters/kafka)")
	case regex:
		return configError("kgo.ConsumeRegex: name the topics with kgo.ConsumeTopics; each needs its dead-letter topic before Run")
	case len(c.topics) == 0:
		return configError("no topics: add kgo.ConsumeTopics(...)")
	}
	if !c.cfg.brokerDLQ {
		for _, t := range c.topics {
			if dlq := c.cfg.DeadLetter(t); dlq == "" || slices.Contains(c.topics, dlq) {
				return configError("topic %q: its dead-letter topic %q is empty or consumed too: give WithDeadLetterTopic another name", t, dlq)
			}
		}
	}
	return nil
}

// diagnose explains why the user's options plus the adapter's made no client.
func diagnose(clientOpts []kgo.Opt, err error) error {
	probe, perr := kgo.NewClient(clientOpts...)
	if perr != nil {
		return configError("the kgo options do not make a client: %v", perr)
	}
	defer probe.Close()
	if group, _ := probe.OptValue(kgo.ShareGroup).(string); group == "" {
		return configError("no share group: add kgo.ShareGroup(name) (for a classic consumer group use adapters/kafka)")
	}
	return configError("the kgo options do not make a client with the adapter's: %v", err)
}

func (c *Consumer[V, T]) closeClients() {
	for _, cl := range c.clients {
		cl.Close()
	}
}

// Close closes the clients of a consumer whose Run was never called (Run closes
// them itself when it returns). It does nothing once Run was called.
func (c *Consumer[V, T]) Close() {
	if c.running.CompareAndSwap(false, true) {
		c.closeClients()
	}
}

// Clients returns the underlying kgo clients, one per member (for metrics or admin
// calls; do not poll or acknowledge with them).
func (c *Consumer[V, T]) Clients() []*kgo.Client { return slices.Clone(c.clients) }

// Run consumes until ctx is cancelled, then shuts down: it stops polling, lets the
// records held settle for up to WithShutdownGrace, cancels the handlers still
// running, releases what is unsettled, flushes the acknowledgements and closes the
// clients (which leave the group). It returns nil after a cancellation. Before it
// takes a record it checks the dead-letter topics exist. Run may be called once.
func (c *Consumer[V, T]) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("kafkashare: Run called twice, or after Close")
	}
	defer c.closeClients()
	if err := c.checkDeadLetterTopics(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	window := c.cfg.clients * c.cfg.maxPoll
	pipe, err := consumer.NewPipeline[T](context.WithoutCancel(ctx), c.store, consumer.WithInFlight(window),
		consumer.WithConcurrency(c.cfg.handlers), consumer.WithSource(Source))
	if err != nil {
		return err
	}
	c.pipe = pipe
	stopWatch := context.AfterFunc(ctx, func() { close(c.stop) })
	defer stopWatch()
	var members sync.WaitGroup
	for _, cl := range c.clients {
		members.Add(1)
		go func() {
			defer members.Done()
			c.member(ctx, cl)
		}()
	}
	members.Wait()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.s.CallTimeout+time.Second)
	defer cancel()
	if err := pipe.Shutdown(sctx); err != nil {
		c.log.Warn("kafkashare: the pipeline did not stop in time", "err", err)
	}
	return nil
}

// checkDeadLetterTopics returns an error naming every consumed topic whose
// dead-letter topic is missing.
func (c *Consumer[V, T]) checkDeadLetterTopics(ctx context.Context) error {
	if c.cfg.brokerDLQ {
		return nil
	}
	want := make([]string, 0, len(c.topics))
	for _, t := range c.topics {
		want = append(want, c.cfg.DeadLetter(t))
	}
	mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	details, err := kadm.NewClient(c.clients[0]).ListTopics(mctx, want...)
	if err != nil {
		return fmt.Errorf("kafkashare: describe the dead-letter topics %v: %w", want, err)
	}
	var errs []error
	for i, dlq := range want {
		if d, ok := details[dlq]; !ok || d.Err != nil {
			errs = append(errs, fmt.Errorf("%w: %q for topic %q: create it (a record that must be dead-lettered is acknowledged only once its copy is written)",
				ErrNoDeadLetterTopic, dlq, c.topics[i]))
		}
	}
	return errors.Join(errs...)
}

// onAcks is the clients' ShareAckCallback: every per-partition answer goes to
// the observers, and refusals are remembered for the renewals in flight.
func (c *Consumer[V, T]) onAcks(_ *kgo.Client, results kgo.ShareAckResults) {
	now := time.Now()
	for _, r := range results {
		if r.Err != nil {
			c.mu.Lock()
			c.ackErr[topicPartition{r.Topic, r.Partition}] = now
			c.mu.Unlock()
			c.log.Warn("kafkashare: the broker refused acknowledgements; their records come back when their locks run out",
				"topic", r.Topic, "partition", r.Partition, "err", r.Err)
		}
		c.reportShareAck(r)
	}
}

// refusedSince reports whether the broker refused acknowledgements of tp at or
// after t.
func (c *Consumer[V, T]) refusedSince(tp topicPartition, t time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.ackErr[tp]
	return ok && !at.Before(t)
}

// member polls one client until ctx ends. Every record of a poll gets its
// terminal acknowledgement before the next poll (kgo would accept the rest).
func (c *Consumer[V, T]) member(ctx context.Context, cl *kgo.Client) {
	for ctx.Err() == nil {
		fetches := cl.PollRecords(ctx, c.cfg.maxPoll)
		if fetches.IsClientClosed() || ctx.Err() != nil {
			break
		}
		fetches.EachError(func(topic string, part int32, err error) {
			if !errors.Is(err, context.Canceled) {
				c.log.Warn("kafkashare: fetch error", "topic", topic, "partition", part, "err", err)
			}
		})
		recs := fetches.Records()
		if len(recs) == 0 {
			continue
		}
		newPoll(c, cl, recs).run(ctx)
	}
	// Whatever a poll left unacknowledged was released by run; send it.
	fctx, cancel := context.WithTimeout(context.Background(), c.s.CallTimeout+time.Second)
	if err := cl.FlushAcks(fctx); err != nil {
		c.log.Warn("kafkashare: acknowledgements not flushed at shutdown; their records come back when their locks run out", "err", err)
	}
	cancel()
}

// coordinatesKey is the key of a record without a key header: derived from the
// share group and the record's coordinates.
func (c *Consumer[V, T]) coordinatesKey(rec *kgo.Record) consumer.Key {
	return consumer.NewKey(coordinatesNS, c.group, rec.Topic, strconv.Itoa(int(rec.Partition)), strconv.FormatInt(rec.Offset, 10))
}
