package kafka

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/idemkit/idemkit/internal/retry"
)

// A topic's dead-letter topic is checked before any of its records is taken:
// at Run's start for the named topics, at the first assignment of each topic a
// regular expression found. A found topic whose dead-letter topic cannot be used
// is stopped (paused) and checked again every recheckEvery.
const (
	checkTimeout = 10 * time.Second // bounds one check (describe, then create); it can hold up a rebalance
	recheckEvery = 5 * time.Second
)

// checkDeadLetterTopics makes sure, before anything is consumed, that the
// dead-letter topic of every named topic exists (creating it with
// WithCreateDeadLetterTopics). It returns the topics whose dead-letter topic
// cannot be used, joined; a request that fails is tried again until ctx ends, and
// then ctx's error is returned. With kgo.ConsumeRegex it does nothing: topics are
// checked as they are assigned.
func (c *Consumer[V, T]) checkDeadLetterTopics(ctx context.Context) error {
	if c.regex {
		return nil
	}
	for try := 1; ; try++ {
		cctx, cancel := context.WithTimeout(ctx, checkTimeout)
		bad, err := c.ensureDeadLetterTopics(cctx, c.topics)
		cancel()
		if err == nil && len(bad) > 0 {
			errs := make([]error, 0, len(bad))
			for _, t := range slices.Sorted(maps.Keys(bad)) {
				errs = append(errs, bad[t])
			}
			return errors.Join(errs...)
		}
		if err == nil {
			c.checked(c.topics...)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		c.log.Warn("kafka: the dead-letter topics could not be checked; trying again", "try", try, "err", err)
		if !retry.Sleep(ctx, retry.Backoff(c.cfg.BackoffBase, c.cfg.BackoffMax, try)) {
			return ctx.Err()
		}
	}
}

// checkAssigned checks the dead-letter topics of the assigned topics not checked
// yet (with kgo.ConsumeRegex, topics appear as the cluster gets them). It runs
// in the assignment callback, before any of their records is fetched; a topic
// whose dead-letter topic cannot be used, or cannot be checked now, is stopped.
func (c *Consumer[V, T]) checkAssigned(ctx context.Context, parts map[string][]int32) {
	c.mu.Lock()
	var fresh []string
	for t := range parts {
		if !c.dlqOK[t] && c.stopped[t] == nil {
			fresh = append(fresh, t)
		}
	}
	c.mu.Unlock()
	if len(fresh) == 0 {
		return
	}
	slices.Sort(fresh)
	cctx, cancel := context.WithTimeout(ctx, checkTimeout)
	bad, err := c.ensureDeadLetterTopics(cctx, fresh)
	cancel()
	for _, t := range fresh {
		switch {
		case err != nil:
			c.stopTopic(&DeadLetterTopicError{Topic: t, DeadLetter: c.cfg.DeadLetter(t), Err: err}, parts[t])
		case bad[t] != nil:
			c.stopTopic(bad[t], parts[t])
		default:
			c.checked(t)
		}
	}
}

// checked records that the dead-letter topics of topics exist.
func (c *Consumer[V, T]) checked(topics ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range topics {
		c.dlqOK[t] = true
	}
}

// stopTopic pauses the fetches of e.Topic: none of its records is taken, so none
// runs and none is committed, until resumeTopic.
func (c *Consumer[V, T]) stopTopic(e *DeadLetterTopicError, parts []int32) {
	c.mu.Lock()
	c.stopped[e.Topic] = e
	c.mu.Unlock()
	c.cl.PauseFetchTopics(e.Topic)
	c.log.Error("kafka: topic stopped: none of its records is consumed until its dead-letter topic can be used",
		"topic", e.Topic, "partitions", fmt.Sprint(parts), "dlq", e.DeadLetter, "err", e.Error(), "recheck_every", recheckEvery)
	c.reportPause(e.Topic, e)
}

// resumeTopic resumes a stopped topic whose dead-letter topic can be used now.
func (c *Consumer[V, T]) resumeTopic(topic string) {
	c.mu.Lock()
	delete(c.stopped, topic)
	c.dlqOK[topic] = true
	c.mu.Unlock()
	c.cl.ResumeFetchTopics(topic)
	c.log.Info("kafka: topic resumed: its dead-letter topic can be used now", "topic", topic, "dlq", c.cfg.DeadLetter(topic))
	c.reportPause(topic, nil)
}

// rechecker checks the stopped topics' dead-letter topics every recheckEvery
// until ctx ends, and resumes the topics whose dead-letter topic can be used now.
func (c *Consumer[V, T]) rechecker(ctx context.Context) {
	tick := time.NewTicker(recheckEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		c.mu.Lock()
		topics := slices.Sorted(maps.Keys(c.stopped))
		c.mu.Unlock()
		if len(topics) == 0 {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, checkTimeout)
		bad, err := c.ensureDeadLetterTopics(cctx, topics)
		cancel()
		if err != nil {
			c.log.Debug("kafka: the stopped topics' dead-letter topics could not be checked", "err", err)
			continue
		}
		for _, t := range topics {
			if bad[t] == nil {
				c.resumeTopic(t)
			}
		}
	}
}
