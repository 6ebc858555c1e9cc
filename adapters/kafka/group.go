package kafka

import (
	"context"
	"fmt"
	"hash/maphash"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// partitionOf returns the state of an assigned partition, made at its first
// records.
func (c *Consumer[V, T]) partitionOf(topic string, part int32) *partition {
	tp := topicPartition{topic, part}
	p := c.parts[tp]
	if p == nil {
		ctx, cancel := context.WithCancel(context.Background())
		p = &partition{topicPartition: tp, ctx: ctx, cancel: cancel, next: -1, done: -1, empty: make(chan struct{}),
			lane: maphash.Comparable(c.seed, tp)}
		c.parts[tp] = p
	}
	return p
}

// assigned checks the dead-letter topics of topics a regular expression found
// (see checkAssigned) before their records are fetched. The group can assign
// partitions while New is still reading the client's options: it waits for them.
func (c *Consumer[V, T]) assigned(ctx context.Context, cl *kgo.Client, parts map[string][]int32) {
	<-c.ready
	if c.regex {
		c.checkAssigned(ctx, parts)
	}
	if c.cfg.onAssigned != nil {
		c.cfg.onAssigned(ctx, cl, parts)
	}
}

// revoked lets the revoked partitions' records settle for up to WithRevokeDrain,
// commits their settled prefix, and forgets them; records still open are cancelled
// and dropped (their next owner runs them). When Run has ended (the client leaves
// the group), its shutdown grace was the drain: nothing runs any more, and what
// still counts as open (a retry waiting for its timer) is not waited for.
func (c *Consumer[V, T]) revoked(ctx context.Context, cl *kgo.Client, parts map[string][]int32) {
	if gone := c.detach(parts); len(gone) > 0 {
		if !c.ended() {
			c.log.Info("kafka: partitions revoked; letting their records settle before the commit",
				"partitions", fmt.Sprint(parts), "drain", c.cfg.revokeDrain)
			dctx, cancel := context.WithTimeout(ctx, c.cfg.revokeDrain)
			c.waitIdle(dctx, gone)
			cancel()
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c.commit(cctx, gone)
		cancel()
		c.forget(gone)
	}
	if c.cfg.onRevoked != nil {
		c.cfg.onRevoked(ctx, cl, parts)
	}
}

// ended reports whether Run has ended.
func (c *Consumer[V, T]) ended() bool {
	select {
	case <-c.stop:
		return true
	default:
		return false
	}
}

// lost forgets the lost partitions without committing: another member owns them.
func (c *Consumer[V, T]) lost(ctx context.Context, cl *kgo.Client, parts map[string][]int32) {
	c.log.Warn("kafka: partitions lost; their settled offsets are not committed", "partitions", fmt.Sprint(parts))
	// No commit is under way while they are marked: a commit whose offsets were
	// read before the loss could otherwise go out under the next generation.
	c.commitMu.Lock()
	gone := c.detach(parts)
	c.mu.Lock()
	for _, p := range gone {
		p.lost = true
	}
	c.mu.Unlock()
	c.commitMu.Unlock()
	if len(gone) > 0 {
		c.forget(gone)
	}
	if c.cfg.onLost != nil {
		c.cfg.onLost(ctx, cl, parts)
	}
}

// detach marks parts gone (no more of their records are taken or started) and
// returns their states.
func (c *Consumer[V, T]) detach(parts map[string][]int32) []*partition {
	c.mu.Lock()
	var out []*partition
	for topic, ps := range parts {
		for _, n := range ps {
			if p := c.parts[topicPartition{topic, n}]; p != nil {
				p.gone.Store(true)
				out = append(out, p)
			}
		}
	}
	// Their records waiting for the starter are dropped now, not behind it.
	var dropped []*record[V]
	kept := c.queue[:0]
	for _, r := range c.queue {
		if r.p.gone.Load() {
			dropped = append(dropped, r)
		} else {
			kept = append(kept, r)
		}
	}
	clear(c.queue[len(kept):])
	c.queue = kept
	c.mu.Unlock()
	for _, r := range dropped {
		c.finish(r, false)
	}
	return out
}

// forget cancels what still runs of ps and drops their states.
func (c *Consumer[V, T]) forget(ps []*partition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range ps {
		p.cancel()
		if c.parts[p.topicPartition] == p {
			delete(c.parts, p.topicPartition)
		}
	}
}

// committer commits the settled prefixes every WithCommitInterval until Run ends.
func (c *Consumer[V, T]) committer() {
	t := time.NewTicker(c.cfg.commitEvery)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c.commit(ctx, nil)
		cancel()
	}
}

// commit commits the settled prefix of the partitions only names (every assigned
// one not gone when nil) that moved since their last commit; a lost partition is
// never committed. What fails stays to be tried again.
func (c *Consumer[V, T]) commit(ctx context.Context, only []*partition) {
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	c.mu.Lock()
	if only == nil {
		for _, p := range c.parts {
			if !p.gone.Load() {
				only = append(only, p)
			}
		}
	}
	offs := make(map[string]map[int32]kgo.EpochOffset)
	var sent []*partition
	for _, p := range only {
		if p.next > p.done && !p.lost {
			if offs[p.topic] == nil {
				offs[p.topic] = make(map[int32]kgo.EpochOffset)
			}
			offs[p.topic][p.part] = kgo.EpochOffset{Epoch: -1, Offset: p.next}
			sent = append(sent, p)
		}
	}
	c.mu.Unlock()
	if len(sent) == 0 {
		return
	}
	failed := make(map[topicPartition]error)
	var reqErr error
	c.cl.CommitOffsetsSync(ctx, offs, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			reqErr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					failed[topicPartition{t.Topic, p.Partition}] = err
				}
			}
		}
	})
	for _, p := range sent {
		off := offs[p.topic][p.part].Offset
		err := reqErr
		if err == nil {
			err = failed[p.topicPartition]
		}
		if err != nil {
			c.log.Warn("kafka: commit failed; the offset stays pending", "topic", p.topic, "partition", p.part, "offset", off, "err", err)
			c.reportCommit(consumer.CommitEvent{Origin: consumer.Origin{Topic: p.topic, Partition: p.part, Offset: off},
				Lag: -1, Err: err})
			continue
		}
		c.mu.Lock()
		p.done = max(p.done, off)
		lag := p.hw - off
		c.mu.Unlock()
		c.reportCommit(consumer.CommitEvent{Origin: consumer.Origin{Topic: p.topic, Partition: p.part, Offset: off}, Lag: lag})
	}
}
