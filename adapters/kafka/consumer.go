package kafka

import (
	"context"
	"errors"
	"hash/maphash"
	"log/slog"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/kafkaconf"
	"github.com/idemkit/idemkit/internal/ordering"
	"github.com/twmb/franz-go/pkg/kgo"
)

// coordinatesNS is the namespace of keys derived from a record's coordinates.
var coordinatesNS = uuid.MustParse("0b5d1f4c-6a55-4f0e-9d43-2c7e1a9b8f10")

// Consumer runs a consumer group through the idempotent handler. Create it with New
// or NewTyped, run it with Run.
type Consumer[V, T any] struct {
	cl     *kgo.Client
	store  consumer.Store
	s      consumer.Settings
	decode func(*kgo.Record) (V, error)
	handle func(ctx context.Context, v V, rec *kgo.Record) (T, error)
	cfg    config
	log    *slog.Logger
	group  string
	topics []string // the named topics, or with kgo.ConsumeRegex the patterns

	regex      bool             // kgo.ConsumeRegex
	patterns   []*regexp.Regexp // with regex: what is consumed,
	excludes   []*regexp.Regexp // and what not (kgo.ConsumeExcludeTopics)
	autoCreate bool             // kgo.AllowAutoTopicCreation

	running atomic.Bool
	pipe    *consumer.Pipeline[T]
	run     func(context.Context) (T, error)          // runRecord, the handler of every record
	settled func(context.Context, consumer.Result[T]) // doneRecord, the DoneContext of every record
	seed    maphash.Seed                              // of the lanes' key hashes
	fetched []*kgo.Record                             // take's buffer (the poll loop's)
	startq  chan struct{}                             // wakes the starter
	stop    chan struct{}                             // closed when Run ends: timers and the starter give up
	ready   chan struct{}                             // closed once New has read the client (cl, group, topics, regex...)

	mu       sync.Mutex
	parts    map[topicPartition]*partition
	queue    []*record[V] // records whose turn has come, to submit in order
	lanes    laneTable[V] // records waiting for their lane
	open     int          // records taken and not finished
	roomWait chan struct{}
	dlqOK    map[string]bool                  // consumed topics whose dead-letter topic exists
	stopped  map[string]*DeadLetterTopicError // consumed topics paused for their dead-letter topic
	commitMu sync.Mutex                       // one commit at a time
}

type topicPartition struct {
	topic string
	part  int32
}

// partition is what the consumer keeps of an assigned partition.
type partition struct {
	topicPartition
	ctx    context.Context // its records' handlers; cancelled when it is revoked or lost
	cancel context.CancelFunc
	track  ordering.Tracker
	open   int   // records taken and not finished
	next   int64 // the offset to commit: one past the settled prefix; -1 before any
	done   int64 // the offset committed last; -1 before any
	hw     int64 // the high watermark seen last
	paused bool
	lane   uint64        // its records' lane in ByPartition
	gone   atomic.Bool   // revoked or lost: its records are dropped as they come back; set under mu
	lost   bool          // lost: another member may own it; it is never committed again
	empty  chan struct{} // closed when open reaches 0 after gone
}

// New returns a consumer that runs handler on every record of the group that
// clientOpts describe (kgo.SeedBrokers, kgo.ConsumerGroup, kgo.ConsumeTopics, TLS,
// SASL...). See the package doc for what it adds to and refuses in clientOpts.
func New[T any](store consumer.Store, clientOpts []kgo.Opt, handler func(ctx context.Context, rec *kgo.Record) (T, error),
	opts ...Option) (*Consumer[*kgo.Record, T], error) {
	decode, handle := kafkaconf.Plain(handler)
	return NewTyped(store, clientOpts, decode, handle, opts...)
}

// NewTyped is New with a decode step: decode turns each record's value into a V
// before its key is taken; a record it cannot decode goes to the dead-letter topic
// with the reason and never reaches handler.
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
	c := &Consumer[V, T]{
		store: store, s: s, decode: decode, handle: handler, cfg: cfg, log: log,
		seed:    maphash.MakeSeed(),
		startq:  make(chan struct{}, 1),
		stop:    make(chan struct{}),
		ready:   make(chan struct{}),
		parts:   make(map[topicPartition]*partition),
		dlqOK:   make(map[string]bool),
		stopped: make(map[string]*DeadLetterTopicError),
	}
	// A paused partition's next fetch can wait behind a fetch of the others that
	// the broker holds for up to FetchMaxWait; kgo's 5s default would stall a
	// resumed partition that long. The user's own FetchMaxWait wins.
	all := append([]kgo.Opt{kgo.FetchMaxWait(250 * time.Millisecond)}, clientOpts...)
	all = append(all,
		kgo.DisableAutoCommit(),
		kgo.OnPartitionsAssigned(c.assigned),
		kgo.OnPartitionsRevoked(c.revoked),
		kgo.OnPartitionsLost(c.lost),
	)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return nil, diagnose(clientOpts, err)
	}
	c.run, c.settled = c.runRecord, c.doneRecord
	err = c.attach(cl)
	close(c.ready)
	if err != nil {
		cl.Close()
		return nil, err
	}
	return c, nil
}

// attach reads what the consumer needs from its client's options and refuses
// topics it cannot consume.
func (c *Consumer[V, T]) attach(cl *kgo.Client) error {
	topics, _ := cl.OptValue(kgo.ConsumeTopics).([]string) // sorted, since franz-go v1.22.3
	regex, _ := cl.OptValue(kgo.ConsumeRegex).(bool)
	if len(topics) == 0 {
		return configError("no topics: add kgo.ConsumeTopics(...)")
	}
	if !regex {
		for _, t := range topics {
			if dlq := c.cfg.DeadLetter(t); dlq == "" || slices.Contains(topics, dlq) {
				return configError("dead-letter topic %q of %q is empty or is itself consumed: give WithDeadLetterTopic another name", dlq, t)
			}
		}
	}
	if st, ok := cl.OptValue(kgo.SessionTimeout).(time.Duration); ok && c.s.Lease > st {
		c.log.Warn("kafka: the store's lease is longer than the group's session timeout: after a member dies, its records wait for the lease after its partitions move",
			"lease", c.s.Lease, "session_timeout", st)
	}
	c.group, _ = cl.OptValue(kgo.ConsumerGroup).(string)
	c.cl, c.topics, c.regex = cl, topics, regex
	c.autoCreate, _ = cl.OptValue(kgo.AllowAutoTopicCreation).(bool)
	if regex {
		for _, x := range topics {
			if re, err := regexp.Compile(x); err == nil { // kgo compiled it already
				c.patterns = append(c.patterns, re)
			}
		}
		excludes, _ := cl.OptValue(kgo.ConsumeExcludeTopics).([]string)
		for _, x := range excludes {
			if re, err := regexp.Compile(x); err == nil { // kgo compiled it already
				c.excludes = append(c.excludes, re)
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
	if group, _ := probe.OptValue(kgo.ConsumerGroup).(string); group == "" {
		return configError("no consumer group: add kgo.ConsumerGroup(name); without one nothing is committed")
	}
	if marks, _ := probe.OptValue(kgo.AutoCommitMarks).(bool); marks {
		return configError("kgo.AutoCommitMarks: drop it; the adapter disables auto-commit and commits settled offsets itself")
	}
	return configError("the kgo options do not make a client with the adapter's (manual commits): %v", err)
}

// Client returns the underlying kgo client (for metrics or admin calls; do not poll
// or commit with it).
func (c *Consumer[V, T]) Client() *kgo.Client { return c.cl }

// Run consumes until ctx is cancelled or the client is closed, then shuts down
// gracefully (see the package doc) and closes the client. It returns nil after a
// cancellation. Before it takes a record it checks the dead-letter topics, and
// returns their *DeadLetterTopicError (joined) when one cannot be used. Run may be
// called once.
func (c *Consumer[V, T]) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("kafka: Run called twice")
	}
	if err := c.checkDeadLetterTopics(ctx); err != nil {
		c.cl.Close()
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	pipe, err := consumer.NewPipeline[T](context.WithoutCancel(ctx), c.store, consumer.WithInFlight(c.cfg.inFlight),
		consumer.WithConcurrency(c.cfg.handlers), consumer.WithSource("kafka"))
	if err != nil {
		c.cl.Close()
		return err
	}
	c.pipe = pipe
	var loops sync.WaitGroup
	loops.Add(3)
	recheck, stopRecheck := context.WithCancel(context.WithoutCancel(ctx))
	go func() { defer loops.Done(); c.starter() }()
	go func() { defer loops.Done(); c.committer() }()
	go func() { defer loops.Done(); c.rechecker(recheck) }()

	c.poll(ctx)

	// Shutdown: what was taken may settle for the grace period; then running
	// handlers are cancelled and the rest dropped, uncommitted.
	grace, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.shutdownGrace)
	c.waitIdle(grace, nil)
	cancel()
	c.commit(context.WithoutCancel(ctx), nil)
	c.mu.Lock()
	for _, p := range c.parts {
		p.gone.Store(true)
		p.cancel()
	}
	c.mu.Unlock()
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), c.s.CallTimeout+time.Second)
	if err := pipe.Shutdown(sctx); err != nil {
		c.log.Warn("kafka: shutdown: handlers still running", "err", err)
	}
	scancel()
	close(c.stop)
	stopRecheck()
	loops.Wait()
	c.cl.Close()
	return nil
}

// poll takes records until ctx ends or the client is closed.
func (c *Consumer[V, T]) poll(ctx context.Context) {
	for ctx.Err() == nil {
		if !c.waitRoom(ctx) {
			return
		}
		fetches := c.cl.PollRecords(ctx, c.cfg.maxPoll)
		if fetches.IsClientClosed() {
			return
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				c.log.Warn("kafka: fetch error", "topic", topic, "partition", p, "err", err)
			}
		})
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			if len(fp.Records) > 0 {
				c.take(fp)
			}
		})
	}
}

// roomCap bounds the records taken and not finished: the engine's window, one
// poll (so that the window stays full while a poll is taken), and one partition's
// in-flight bound (so that a stuck partition is paused before it fills the member).
func (c *Consumer[V, T]) roomCap() int { return c.cfg.inFlight + c.cfg.maxPoll + c.cfg.partitionLimit }

// waitRoom waits while the records taken and not finished reach roomCap.
func (c *Consumer[V, T]) waitRoom(ctx context.Context) bool {
	for {
		c.mu.Lock()
		if c.open < c.roomCap() {
			c.mu.Unlock()
			return true
		}
		if c.roomWait == nil {
			c.roomWait = make(chan struct{})
		}
		wait := c.roomWait
		c.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return false
		}
	}
}

// waitIdle waits until no record of the partitions only selects (all when nil) is
// open, or ctx ends.
func (c *Consumer[V, T]) waitIdle(ctx context.Context, only []*partition) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		c.mu.Lock()
		open := c.open
		if only != nil {
			open = 0
			for _, p := range only {
				open += p.open
			}
		}
		c.mu.Unlock()
		if open == 0 {
			return
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}
