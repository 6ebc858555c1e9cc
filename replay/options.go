package replay

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemkit/idemkit/consumer"
)

// ErrConfig is matched by every configuration error of Plan and Execute.
var ErrConfig = errors.New("replay: invalid configuration")

func configError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
}

// checkScope is the rule of every entry point that runs handlers or changes
// records (Execute, RedriveKafka, RedriveRabbitMQ): a store left on the default
// scope is refused, as the broker adapters refuse it, since the services that
// handle one stream of messages would share its records. The error matches
// ErrConfig and consumer.ErrDefaultScope.
func checkScope(s consumer.Settings) error {
	if err := s.CheckScope(); err != nil {
		return configError("%w", err)
	}
	return nil
}

// Option configures Plan and Execute. Every option states its default.
type Option interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	batch       int
	concurrency int
	rate        float64
	canonical   func(Message) ([]byte, error)
	maxReplays  int
	accept      bool
	checkpoint  Checkpointer
	progress    func(Progress)
	quarantine  func(Message) error
	logger      *slog.Logger
	now         func() time.Time
}

func newConfig(opts []Option) (config, error) {
	c := config{batch: 500, concurrency: 16, maxReplays: 5, now: time.Now}
	for _, o := range opts {
		if o == nil {
			return c, configError("nil option")
		}
		o.apply(&c)
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.batch < 1 || c.batch > 10000:
		return c, configError("batch size %d: WithBatchSize takes 1 to 10000", c.batch)
	case c.concurrency < 1:
		return c, configError("concurrency %d: WithConcurrency takes at least 1", c.concurrency)
	case c.rate < 0:
		return c, configError("rate %v: WithRate takes 0 (unlimited) or more messages per second", c.rate)
	case c.maxReplays < 0:
		return c, configError("max replays %d: WithMaxReplays takes 0 (off) or more", c.maxReplays)
	}
	return c, nil
}

// WithBatchSize sets how many messages are read and planned together, and how many
// Execute keeps handed to the engine and not yet settled (the Pipeline's window;
// one claim or completion call carries at most that many). Execute reports
// progress, acks a queue source's messages and may save its checkpoint after each
// batch. Default 500, at most 10,000.
func WithBatchSize(n int) Option { return optFunc(func(c *config) { c.batch = n }) }

// WithConcurrency sets how many handlers run at once (the Pipeline's handlers).
// With 1, they run one after another in source order. Default 16.
func WithConcurrency(n int) Option { return optFunc(func(c *config) { c.concurrency = n }) }

// WithRate limits execution to perSecond messages per second, paced per message
// (the n-th message that may run is handed to the engine n/perSecond seconds after
// the start at the earliest; duplicates count). Default 0: unlimited.
func WithRate(perSecond float64) Option { return optFunc(func(c *config) { c.rate = perSecond }) }

// WithCanonical sets the bytes that are fingerprinted for a message: the payload as
// the live consumer passed it to idemkit. Use it when the stored copy was
// re-encoded since (CompactJSON undoes whitespace changes), or a replay finds every
// message in CONFLICT. The handler still gets the message as stored. Default: the
// payload as stored.
func WithCanonical(fn func(Message) ([]byte, error)) Option {
	return optFunc(func(c *config) { c.canonical = fn })
}

// WithMaxReplays is the loop guard: a message whose idemkit-replay-count header has
// reached n is not run but quarantined (see WithQuarantine). Default 5; 0 turns the
// guard off.
func WithMaxReplays(n int) Option { return optFunc(func(c *config) { c.maxReplays = n }) }

// WithQuarantine sets where the loop guard puts the messages it stops (a file, a
// topic); an error stops the replay. Default: they are only counted (QUARANTINE)
// and their keys reported.
func WithQuarantine(fn func(Message) error) Option {
	return optFunc(func(c *config) { c.quarantine = fn })
}

// WithAcceptBeyondRetention lets Execute run messages older than the store's
// retention whose records are gone: such a message may have been handled already
// and its record expired since, so it runs again. Default off: Execute stops before
// the first batch holding such a message, with ErrBeyondRetention.
func WithAcceptBeyondRetention(on bool) Option { return optFunc(func(c *config) { c.accept = on }) }

// WithCheckpoint keeps Execute's progress in cp: it resumes after the checkpoint
// cp holds, and saves a new one as batches' effects are recorded (at most once a
// second) and at the end. Default:
// none (a replay starts from the source's beginning; the store still turns what was
// done into DUPLICATEs).
func WithCheckpoint(cp Checkpointer) Option { return optFunc(func(c *config) { c.checkpoint = cp }) }

// WithProgress calls fn after every batch (once each of its messages has its
// verdict), and once at the end, with the progress so far. fn runs on the replay's goroutine: keep it short. Default: none.
func WithProgress(fn func(Progress)) Option { return optFunc(func(c *config) { c.progress = fn }) }

// WithLogger sets the logger. Default: logs are discarded.
func WithLogger(l *slog.Logger) Option { return optFunc(func(c *config) { c.logger = l }) }
