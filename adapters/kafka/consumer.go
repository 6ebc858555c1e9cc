package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/idemkit/idemkit/consumer"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// coordinatesNS is the namespace of keys derived from a record's coordinates.
var coordinatesNS = uuid.MustParse("0b5d1f4c-6a55-4f0e-9d43-2c7e1a9b8f10")

// Consumer runs a consumer group through the idempotent handler. Create it with New
// or NewTyped, run it with Run.
type Consumer[V, T any] struct {
	cl     *kgo.Client
	store  consumer.Store
	decode func(*kgo.Record) (V, error)
	handle func(ctx context.Context, v V, rec *kgo.Record) (T, error)
	cfg    config
	log    *slog.Logger
	topics []string

	running atomic.Bool
	mu      sync.Mutex
	pending map[string]map[int32]kgo.EpochOffset // settled, not yet committed
	hw      map[string]map[int32]int64           // high watermarks seen, for lag
}

// New returns a consumer that runs handler on every record of the group that
// clientOpts describe (kgo.SeedBrokers, kgo.ConsumerGroup, kgo.ConsumeTopics, TLS,
// SASL...). See the package doc for what it adds to and refuses in clientOpts.
func New[T any](store consumer.Store, clientOpts []kgo.Opt, handler func(ctx context.Context, rec *kgo.Record) (T, error),
	opts ...Opt) (*Consumer[*kgo.Record, T], error) {
	if handler == nil {
		return nil, configError("nil handler")
	}
	return NewTyped(store, clientOpts,
		func(rec *kgo.Record) (*kgo.Record, error) { return rec, nil },
		func(ctx context.Context, rec *kgo.Record, _ *kgo.Record) (T, error) { return handler(ctx, rec) },
		opts...)
}

// NewTyped is New with a decode step: decode turns each record's value into a V
// before its key is taken; a record it cannot decode goes to the dead-letter topic
// with the reason and never reaches handler.
func NewTyped[V, T any](store consumer.Store, clientOpts []kgo.Opt, decode func(*kgo.Record) (V, error),
	handler func(ctx context.Context, v V, rec *kgo.Record) (T, error), opts ...Opt) (*Consumer[V, T], error) {
	cfg := defaults()
	for _, o := range opts {
		if o == nil {
			return nil, configError("nil option")
		}
		o.apply(&cfg)
	}
	switch {
	case store == nil:
		return nil, configError("nil store: pass consumer.NewRedisStore(...)")
	case decode == nil:
		return nil, configError("nil decode function")
	case handler == nil:
		return nil, configError("nil handler")
	case cfg.valueType != nil && cfg.valueType != reflect.TypeFor[V]():
		return nil, configError("WithValueKey takes a %v but the consumer decodes %v", cfg.valueType, reflect.TypeFor[V]())
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := store.Settings()
	if cfg.inProgressWait == 0 {
		cfg.inProgressWait = s.Lease + time.Second
	}
	log := cfg.logger
	if log == nil {
		log = s.Logger
	}
	c := &Consumer[V, T]{
		store: store, decode: decode, handle: handler, cfg: cfg, log: log,
		pending: make(map[string]map[int32]kgo.EpochOffset),
		hw:      make(map[string]map[int32]int64),
	}
	all := append(slices.Clone(clientOpts),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(c.assigned),
		kgo.OnPartitionsRevoked(c.revoked),
		kgo.OnPartitionsLost(c.lost),
	)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return nil, diagnose(clientOpts, err)
	}
	topicSet, _ := cl.OptValue(kgo.ConsumeTopics).(map[string]*regexp.Regexp)
	topics := slices.Sorted(maps.Keys(topicSet))
	regex, _ := cl.OptValue(kgo.ConsumeRegex).(bool)
	switch {
	case len(topics) == 0:
		cl.Close()
		return nil, configError("no topics: add kgo.ConsumeTopics(...)")
	}
	if !regex {
		for _, t := range topics {
			if dlq := cfg.deadLetter(t); dlq == "" || slices.Contains(topics, dlq) {
				cl.Close()
				return nil, configError("dead-letter topic %q of %q is empty or is itself consumed: give WithDeadLetterTopic another name", dlq, t)
			}
		}
	}
	if st, ok := cl.OptValue(kgo.SessionTimeout).(time.Duration); ok && s.Lease > st {
		log.Warn("kafka: the store's lease is longer than the group's session timeout: after a member dies, its records wait for the lease after its partitions move",
			"lease", s.Lease, "session_timeout", st)
	}
	c.cl, c.topics = cl, topics
	return c, nil
}

// diagnose explains why the user's options plus the adapter's made no client.
func diagnose(clientOpts []kgo.Opt, err error) error {
	probe, perr := kgo.NewClient(clientOpts...)
	if perr != nil {
		return configError("the kgo options do not make a client: %v", perr)
	}
	defer probe.Close()
	if group, _ := probe.OptValue(kgo.ConsumerGroup).(string); group == "" {
		return configError("no consumer group: add kgo.ConsumerGroup(name); without one nothing is committed")
	}
	if marks, _ := probe.OptValue(kgo.AutoCommitMarks).(bool); marks {
		return configError("kgo.AutoCommitMarks: drop it; the adapter disables auto-commit and commits settled offsets itself")
	}
	return configError("the kgo options do not make a client with the adapter's (manual commits, rebalances blocked while polling): %v", err)
}

// Client returns the underlying kgo client (for metrics or admin calls; do not poll
// or commit with it).
func (c *Consumer[V, T]) Client() *kgo.Client { return c.cl }

// Run consumes until ctx is cancelled or the client is closed, then shuts down
// gracefully (see the package doc) and closes the client. It returns nil after a
// cancellation; Run may be called once.
func (c *Consumer[V, T]) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("kafka: Run called twice")
	}
	defer c.cl.CloseAllowingRebalance()
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	done := make(chan struct{})
	defer close(done)
	go func() { // the grace period: started records may finish, then are abandoned
		select {
		case <-ctx.Done():
		case <-done:
			return
		}
		t := time.NewTimer(c.cfg.shutdownGrace)
		defer t.Stop()
		select {
		case <-t.C:
			cancelWork()
		case <-done:
		}
	}()

	for ctx.Err() == nil {
		pollCtx, cancelPoll := ctx, context.CancelFunc(func() {})
		if c.hasPending() { // an idle partition must not keep a failed commit waiting
			pollCtx, cancelPoll = context.WithTimeout(ctx, time.Second)
		}
		fetches := c.cl.PollRecords(pollCtx, c.cfg.maxPoll)
		cancelPoll()
		if fetches.IsClientClosed() {
			break
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				c.log.Warn("kafka: fetch error", "topic", topic, "partition", p, "err", err)
			}
		})
		c.processPoll(work, fetches)
		cctx, cancel := context.WithTimeout(work, 30*time.Second)
		c.commitPending(cctx, nil)
		cancel()
		c.cl.AllowRebalance()
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	c.commitPending(cctx, nil)
	cancel()
	return nil
}

type partitionRun struct {
	topic   string
	part    int32
	recs    []*kgo.Record
	hw      int64
	settled int
}

// processPoll runs every partition of a poll in parallel and records what settled.
func (c *Consumer[V, T]) processPoll(ctx context.Context, fetches kgo.Fetches) {
	var runs []*partitionRun
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) > 0 {
			runs = append(runs, &partitionRun{topic: p.Topic, part: p.Partition, recs: p.Records, hw: p.HighWatermark})
		}
	})
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.settled = c.processPartition(ctx, r.recs)
		}()
	}
	wg.Wait()

	rewind := make(map[string]map[int32]kgo.EpochOffset)
	c.mu.Lock()
	for _, r := range runs {
		if r.settled > 0 {
			last := r.recs[r.settled-1]
			setOffset(c.pending, r.topic, r.part, kgo.EpochOffset{Epoch: last.LeaderEpoch, Offset: last.Offset + 1})
		}
		if c.hw[r.topic] == nil {
			c.hw[r.topic] = make(map[int32]int64)
		}
		c.hw[r.topic][r.part] = r.hw
		if r.settled < len(r.recs) {
			next := r.recs[r.settled]
			setOffset(rewind, r.topic, r.part, kgo.EpochOffset{Epoch: next.LeaderEpoch, Offset: next.Offset})
			c.log.Info("kafka: partition left at an unsettled record; it is fetched again",
				"topic", r.topic, "partition", r.part, "offset", next.Offset)
		}
	}
	c.mu.Unlock()
	if len(rewind) > 0 {
		c.cl.SetOffsets(rewind)
	}
}

func (c *Consumer[V, T]) hasPending() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, parts := range c.pending {
		if len(parts) > 0 {
			return true
		}
	}
	return false
}

func setOffset(m map[string]map[int32]kgo.EpochOffset, topic string, p int32, o kgo.EpochOffset) {
	if m[topic] == nil {
		m[topic] = make(map[int32]kgo.EpochOffset)
	}
	m[topic][p] = o
}

// commitPending commits the settled offsets (of only the partitions in `only`, when
// given) synchronously. What fails to commit stays pending for the next try.
func (c *Consumer[V, T]) commitPending(ctx context.Context, only map[string][]int32) {
	c.mu.Lock()
	offs := make(map[string]map[int32]kgo.EpochOffset)
	for topic, parts := range c.pending {
		for p, o := range parts {
			if only == nil || slices.Contains(only[topic], p) {
				setOffset(offs, topic, p, o)
			}
		}
	}
	c.mu.Unlock()
	if len(offs) == 0 {
		return
	}
	failed := make(map[string]map[int32]error)
	var reqErr error
	c.cl.CommitOffsetsSync(ctx, offs, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			reqErr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					if failed[t.Topic] == nil {
						failed[t.Topic] = make(map[int32]error)
					}
					failed[t.Topic][p.Partition] = err
				}
			}
		}
	})
	if reqErr != nil {
		c.log.Warn("kafka: commit failed; the offsets stay pending", "err", reqErr)
		for topic, parts := range offs {
			for p, o := range parts {
				c.onCommitError(topic, p, o.Offset, reqErr)
			}
		}
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for topic, parts := range offs {
		for p, o := range parts {
			if err := failed[topic][p]; err != nil {
				c.log.Warn("kafka: commit of a partition failed; its offset stays pending",
					"topic", topic, "partition", p, "offset", o.Offset, "err", err)
				c.onCommitError(topic, p, o.Offset, err)
				continue
			}
			if cur, ok := c.pending[topic][p]; ok && cur.Offset == o.Offset {
				delete(c.pending[topic], p)
			}
			c.onCommit(topic, p, o.Offset, c.hw[topic][p]-o.Offset)
		}
	}
}

func (c *Consumer[V, T]) assigned(ctx context.Context, cl *kgo.Client, parts map[string][]int32) {
	if c.cfg.onAssigned != nil {
		c.cfg.onAssigned(ctx, cl, parts)
	}
}

// revoked commits what was settled on the revoked partitions, synchronously.
func (c *Consumer[V, T]) revoked(ctx context.Context, cl *kgo.Client, parts map[string][]int32) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	c.commitPending(cctx, parts)
	cancel()
	c.forget(parts)
	if c.cfg.onRevoked != nil {
		c.cfg.onRevoked(ctx, cl, parts)
	}
}

// lost forgets the lost partitions without committing: another member owns them.
func (c *Consumer[V, T]) lost(ctx context.Context, cl *kgo.Client, parts map[string][]int32) {
	c.log.Warn("kafka: partitions lost; their settled offsets are not committed", "partitions", fmt.Sprint(parts))
	c.forget(parts)
	if c.cfg.onLost != nil {
		c.cfg.onLost(ctx, cl, parts)
	}
}

func (c *Consumer[V, T]) forget(parts map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for topic, ps := range parts {
		for _, p := range ps {
			delete(c.pending[topic], p)
		}
	}
}
