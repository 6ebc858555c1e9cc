package consumer

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// Defaults of the options.
const (
	DefaultScope         = "default"
	DefaultPrefix        = "idemkit"
	DefaultLease         = 30 * time.Second
	DefaultRetention     = 24 * time.Hour
	DefaultMaxAttempts   = 5
	DefaultMaxResultSize = 1 << 20
	DefaultCallTimeout   = 5 * time.Second

	// MinLease is the shortest lease accepted: the lease is renewed every lease/3.
	MinLease = 10 * time.Millisecond
	// MinRetention is the shortest retention accepted.
	MinRetention = time.Second
	// MaxResultSizeLimit is the largest WithMaxResultSize accepted.
	MaxResultSizeLimit = 256 << 20
	maxScopeLen        = 128
)

// Settings are a store's resolved options. Read them with Store.Settings.
type Settings struct {
	Scope          string
	Prefix         string
	Lease          time.Duration
	Retention      time.Duration
	MaxAttempts    int
	Fingerprint    bool
	MaxResultSize  int
	Codec          Codec
	FailOpen       bool
	WaitInProgress time.Duration
	CallTimeout    time.Duration
	Logger         *slog.Logger
	Locker         Locker
	Observers      []Observer
	Completions    CompletionLookup

	hooks     *hooks      // Observers sorted by hook interface
	extension map[any]any // what StoreSetting set, by key
}

// Option configures a store. Every option states its default.
type Option interface{ apply(*Settings) }

type optFunc func(*Settings)

func (f optFunc) apply(s *Settings) { f(s) }

// StoreSetting returns an option that carries one store's own setting under key,
// for a store package to define its options (such as the Redis store's eviction
// check) beside these. Stores read it back with Settings.StoreSetting; the last
// value set for a key wins. Use an unexported key type, as with context values.
func StoreSetting(key, value any) Option {
	return optFunc(func(s *Settings) {
		if s.extension == nil {
			s.extension = map[any]any{}
		}
		s.extension[key] = value
	})
}

// StoreSetting returns what the StoreSetting option set for key, or nil.
func (s Settings) StoreSetting(key any) any { return s.extension[key] }

// WithScope sets the scope that keys live in: a service or consumer-group name. Two
// scopes keep separate records for the same key. Default "default". It may not
// contain '{' or '}' (they delimit the Redis Cluster hash tag).
func WithScope(scope string) Option { return optFunc(func(s *Settings) { s.Scope = scope }) }

// WithPrefix sets the Redis key prefix. Default "idemkit". It may not contain '{' or '}'.
func WithPrefix(prefix string) Option { return optFunc(func(s *Settings) { s.Prefix = prefix }) }

// WithLease sets how long a claim stays live without renewal. A running handler's
// lease is renewed every lease/3; a crashed worker's claim is taken over once its
// lease runs out. A handler whose lease could not be renewed is cancelled
// LeaseMargin(lease) (11% of the lease) before another worker could take over.
// Default 30s, minimum 10ms. Keep it below the broker's redelivery deadline.
func WithLease(d time.Duration) Option { return optFunc(func(s *Settings) { s.Lease = d }) }

// WithRetention sets how long completed and failed records are kept, so duplicates
// arriving within it are recognised. Default 24h, minimum 1s.
func WithRetention(d time.Duration) Option { return optFunc(func(s *Settings) { s.Retention = d }) }

// WithMaxAttempts sets how many attempts a key gets (retryable failures and crashed
// attempts count) before it fails for good with ErrAttemptsExhausted. Default 5.
func WithMaxAttempts(n int) Option { return optFunc(func(s *Settings) { s.MaxAttempts = n }) }

// WithFingerprint turns the payload fingerprint (SHA-256) on or off. When on, a key
// reused with another payload gives ErrPayloadConflict. Default on.
func WithFingerprint(on bool) Option { return optFunc(func(s *Settings) { s.Fingerprint = on }) }

// WithMaxResultSize sets the largest encoded result kept for duplicates, in bytes.
// Over it the operation is still recorded as done, the result is dropped, and
// duplicates say so with ErrResultTooLarge. Default 1 MiB, at most 256 MiB.
func WithMaxResultSize(n int) Option { return optFunc(func(s *Settings) { s.MaxResultSize = n }) }

// WithCodec sets how results are encoded for storage. Default JSONCodec.
func WithCodec(c Codec) Option { return optFunc(func(s *Settings) { s.Codec = c }) }

// WithFailOpen makes an unreachable store run the handler unguarded (logged at Warn
// on every run, Result.Unguarded set) instead of returning ErrStoreUnavailable.
// Default off: fail closed, nothing runs unguarded.
func WithFailOpen(on bool) Option { return optFunc(func(s *Settings) { s.FailOpen = on }) }

// WithWaitInProgress makes an execution that finds another owner's live claim wait
// up to d for that run to finish (then returning its DUPLICATE, or taking the key
// over if the other owner dies) before returning IN_PROGRESS. Default 0: return
// IN_PROGRESS at once.
func WithWaitInProgress(d time.Duration) Option {
	return optFunc(func(s *Settings) { s.WaitInProgress = d })
}

// WithCallTimeout bounds how long the library waits for any one store call
// (claim, completion, renewal, release, read), whether or not the client honours
// context deadlines on its sockets. A call without a reply in time counts as a
// store outage (ErrStoreUnavailable); it may still have run, which every
// transition tolerates. Renewals are bounded by lease/3 as well, claims by the
// lease less its margin. Default 5s.
func WithCallTimeout(d time.Duration) Option {
	return optFunc(func(s *Settings) { s.CallTimeout = d })
}

// WithLogger sets the logger. Default: logs are discarded.
func WithLogger(l *slog.Logger) Option { return optFunc(func(s *Settings) { s.Logger = l }) }

// NewSettings resolves opts the way the stores of this package do: defaults, then
// the options, then Validate. Store implementations outside this package use it so
// that their options mean the same. It fails with ErrInvalidConfig.
func NewSettings(opts ...Option) (Settings, error) { return newSettings(opts) }

func newSettings(opts []Option) (Settings, error) {
	s := Settings{
		Scope:         DefaultScope,
		Prefix:        DefaultPrefix,
		Lease:         DefaultLease,
		Retention:     DefaultRetention,
		MaxAttempts:   DefaultMaxAttempts,
		Fingerprint:   true,
		MaxResultSize: DefaultMaxResultSize,
		Codec:         JSONCodec{},
		CallTimeout:   DefaultCallTimeout,
	}
	for _, o := range opts {
		if o == nil {
			return s, configError("nil option")
		}
		o.apply(&s)
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	s.hooks = sortHooks(s.Observers)
	if _, isJSON := s.Codec.(JSONCodec); s.Completions != nil && !isJSON {
		return s, configError("WithCompletions with the codec %T: transactional completions hold JSON results, so use the default JSON codec", s.Codec)
	}
	return s, s.Validate()
}

// ErrDefaultScope: a store on DefaultScope was given to an entry point whose
// records several services may share (see Settings.CheckScope).
var ErrDefaultScope = errors.New("consumer: the store has the default scope \"" + DefaultScope + "\"")

// CheckScope is the one rule for entry points that several services may point at
// the same stream of messages (the broker adapters, the HTTP middleware, replay,
// redrive, the CLI): they refuse a store left on DefaultScope, since two services
// consuming one topic or one fanout exchange would share its records, and the
// second would take every message the first handled for a DUPLICATE and never run
// it. It returns nil for any other scope, and an error matching ErrDefaultScope
// that says what to change otherwise.
func (s Settings) CheckScope() error {
	if s.Scope != DefaultScope {
		return nil
	}
	return fmt.Errorf("%w: give it consumer.WithScope(<this service's name>), so that each service that handles these messages keeps records of its own", ErrDefaultScope)
}

// Validate reports the first setting that is out of range, saying what to change.
func (s Settings) Validate() error {
	switch {
	case s.Scope == "":
		return configError("empty scope: use WithScope with your service or consumer-group name")
	case len(s.Scope) > maxScopeLen:
		return configError("scope is %d bytes: WithScope takes at most %d", len(s.Scope), maxScopeLen)
	case strings.ContainsAny(s.Scope, "{}"):
		return configError("scope %q contains '{' or '}': remove them (they delimit the Redis Cluster hash tag)", s.Scope)
	case s.Prefix == "":
		return configError("empty prefix: omit WithPrefix for the default %q", DefaultPrefix)
	case strings.ContainsAny(s.Prefix, "{}"):
		return configError("prefix %q contains '{' or '}': remove them (they delimit the Redis Cluster hash tag)", s.Prefix)
	case s.Lease < MinLease || s.Lease%time.Millisecond != 0:
		return configError("lease %v: WithLease takes a whole number of milliseconds, at least %v", s.Lease, MinLease)
	case s.Retention < MinRetention || s.Retention%time.Millisecond != 0:
		return configError("retention %v: WithRetention takes a whole number of milliseconds, at least %v", s.Retention, MinRetention)
	case s.MaxAttempts < 1:
		return configError("max attempts %d: WithMaxAttempts takes at least 1", s.MaxAttempts)
	case s.MaxResultSize < 1 || s.MaxResultSize > MaxResultSizeLimit:
		return configError("max result size %d: WithMaxResultSize takes 1 to %d bytes", s.MaxResultSize, MaxResultSizeLimit)
	case s.Codec == nil:
		return configError("nil codec: omit WithCodec for JSON")
	case s.CallTimeout < time.Millisecond:
		return configError("call timeout %v: WithCallTimeout takes at least 1ms", s.CallTimeout)
	case s.WaitInProgress < 0:
		return configError("wait %v: WithWaitInProgress takes 0 (off) or more", s.WaitInProgress)
	}
	return nil
}
