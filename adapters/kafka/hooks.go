package kafka

import (
	"github.com/idemkit/idemkit/consumer"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Hook observes the adapter, for metrics. A hook implements any of the interfaces
// below; adding an interface later never breaks an existing hook. Hooks are called
// synchronously from partition workers: keep them fast.
type Hook any

// OutcomeHook is told the final outcome of every record (after retries).
type OutcomeHook interface {
	OnOutcome(rec *kgo.Record, outcome consumer.Outcome)
}

// RetryHook is told of every in-place retry.
type RetryHook interface {
	OnRetry(rec *kgo.Record, attempt int, err error)
}

// DeadLetterHook is told of every record produced to a dead-letter topic.
type DeadLetterHook interface {
	OnDeadLetter(rec *kgo.Record, dlqTopic string, reason error)
}

// CommitHook is told of every committed offset, with the partition's lag then
// (high watermark minus the committed offset).
type CommitHook interface {
	OnCommit(topic string, partition int32, offset, lag int64)
}

// CommitErrorHook is told of every commit that failed (the offset stays pending
// and is tried again, unless the partition is revoked or lost).
type CommitErrorHook interface {
	OnCommitError(topic string, partition int32, offset int64, err error)
}

// TopicStopHook is told when a topic stops: with kgo.ConsumeRegex, a topic whose
// dead-letter topic cannot be used (err is a *DeadLetterTopicError; errors.Is
// ErrNoDeadLetterTopic when it does not exist) is paused when its partitions are
// first assigned, before any of its records is taken.
type TopicStopHook interface {
	OnTopicStopped(topic string, err error)
}

// TopicResumeHook is told when a stopped topic goes on: its dead-letter topic can
// be used now.
type TopicResumeHook interface {
	OnTopicResumed(topic string)
}

func (c *Consumer[V, T]) onTopicStopped(topic string, err error) {
	for _, h := range c.cfg.hooks {
		if h, ok := h.(TopicStopHook); ok {
			h.OnTopicStopped(topic, err)
		}
	}
}

func (c *Consumer[V, T]) onTopicResumed(topic string) {
	for _, h := range c.cfg.hooks {
		if h, ok := h.(TopicResumeHook); ok {
			h.OnTopicResumed(topic)
		}
	}
}

func (c *Consumer[V, T]) onCommitError(topic string, partition int32, offset int64, err error) {
	for _, h := range c.cfg.hooks {
		if h, ok := h.(CommitErrorHook); ok {
			h.OnCommitError(topic, partition, offset, err)
		}
	}
}

func (c *Consumer[V, T]) onOutcome(rec *kgo.Record, o consumer.Outcome) {
	for _, h := range c.cfg.hooks {
		if h, ok := h.(OutcomeHook); ok {
			h.OnOutcome(rec, o)
		}
	}
}

func (c *Consumer[V, T]) onRetry(rec *kgo.Record, attempt int, err error) {
	for _, h := range c.cfg.hooks {
		if h, ok := h.(RetryHook); ok {
			h.OnRetry(rec, attempt, err)
		}
	}
}

func (c *Consumer[V, T]) onDeadLetter(rec *kgo.Record, topic string, reason error) {
	for _, h := range c.cfg.hooks {
		if h, ok := h.(DeadLetterHook); ok {
			h.OnDeadLetter(rec, topic, reason)
		}
	}
}

func (c *Consumer[V, T]) onCommit(topic string, partition int32, offset, lag int64) {
	for _, h := range c.cfg.hooks {
		if h, ok := h.(CommitHook); ok {
			h.OnCommit(topic, partition, offset, lag)
		}
	}
}
