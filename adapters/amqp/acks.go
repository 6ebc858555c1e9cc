package amqp

import (
	"fmt"
	"time"

	"github.com/idemkit/idemkit/consumer"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// ack hands a settled delivery's tag to the acker; once the acker is gone, the
// delivery returns to the queue with the channel.
func (f *flow[V, T]) ack(tag uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.acked {
		f.acks <- tag // the acker never takes mu: it drains
	}
}

// acker acks settled tags, taking whatever is waiting at once. The tags that
// extend the contiguous settled prefix are acked with one multiple-ack of the
// highest of them (every tag below it is settled). A tag settled above the prefix
// (a delivery that finished before an earlier one) is held for up to ackLinger,
// and at most an eighth of the prefetch window is held: usually the prefix
// reaches it by then and the multiple-ack covers it; else it is acked alone, so a
// stalled delivery holds back no other's ack for longer, nor many prefetch slots.
// Acks alone go in bursts, in one write (corkConn): past the cap, the held tags
// down to half of it; when the oldest has lingered out, every tag held for half
// as long with it.
func (f *flow[V, T]) acker() {
	defer close(f.done)
	var (
		batch   []uint64
		settled []int64
		held    []heldTag // settled above the prefix, not acked, oldest first
		broken  bool      // an ack failed: the channel is gone, nothing more is acked
	)
	maxHeld := max(1, cap(f.acks)/8)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for open := true; open || len(held) > 0; {
		batch = batch[:0]
		if len(held) == 0 {
			t, ok := <-f.acks
			if !ok {
				return
			}
			batch = append(batch, t)
		} else if open {
			timer.Reset(time.Until(held[0].since.Add(ackLinger)))
			select {
			case t, ok := <-f.acks:
				if ok {
					batch = append(batch, t)
				} else {
					open = false
				}
			case <-timer.C:
			}
			timer.Stop()
		}
		for more := open; more; {
			select {
			case t, ok := <-f.acks:
				if !ok {
					open, more = false, false
					break
				}
				batch = append(batch, t)
			default:
				more = false
			}
		}
		if broken {
			held = held[:0]
			continue
		}
		settled = settled[:0]
		for _, t := range batch {
			settled = append(settled, int64(t))
		}
		through, _ := f.tags.SettleAll(settled)
		now := time.Now()
		var top, highest uint64
		n := 0
		for _, t := range batch {
			if int64(t) <= through {
				top = max(top, t)
				n++
			} else {
				held = append(held, heldTag{tag: t, since: now})
			}
		}
		keep := held[:0]
		for _, h := range held {
			if int64(h.tag) <= through {
				top = max(top, h.tag)
				n++
			} else {
				keep = append(keep, h)
			}
		}
		held = keep
		k := alone(held, open, maxHeld, now)
		corked := k > 1 || k == 1 && top > 0 // more than one frame
		if corked {
			f.cork.cork()
		}
		var err error
		if top > 0 {
			err = f.sub.Ack(top, true)
			highest = top
		}
		for i := 0; i < k && err == nil; i++ {
			err = f.sub.Ack(held[i].tag, false)
			highest = max(highest, held[i].tag)
			n++
		}
		if corked {
			if uerr := f.cork.uncork(); err == nil {
				err = uerr
			}
		}
		held = held[:copy(held, held[k:])]
		if err != nil {
			broken = true
			f.failed(fmt.Errorf("amqp: ack: %w", err))
			continue
		}
		if n > 0 && f.w.hooks.ack {
			f.w.reportAck(consumer.AckEvent{Origin: consumer.Origin{Queue: f.w.topo.Queue, DeliveryTag: highest}, Messages: n})
		}
	}
}

// alone is how many of the held tags, oldest first, to ack one by one now: all
// of them once the acks are closed; past maxHeld, down to half of it; once the
// oldest has waited ackLinger, each that has waited half as long.
func alone(held []heldTag, open bool, maxHeld int, now time.Time) int {
	switch {
	case !open:
		return len(held)
	case len(held) > maxHeld:
		return len(held) - maxHeld/2
	case len(held) == 0 || now.Sub(held[0].since) < ackLinger:
		return 0
	}
	k := 1
	for k < len(held) && now.Sub(held[k].since) >= ackLinger/2 {
		k++
	}
	return k
}

// heldTag is a settled tag above the settled prefix, held since since.
type heldTag struct {
	tag   uint64
	since time.Time
}

// ackLinger is how long a tag settled above the settled prefix waits for the
// prefix to reach it before it is acked alone: deliveries finish a little out of
// order all the time, and an ack apiece would cost a frame and a write each (and
// the broker as much again): 5ms leaves about 1 in 500 deliveries acked alone in
// the no-op bench (1 in 3.5 without it). It holds a settled delivery's prefetch
// slot that long at most.
const ackLinger = 5 * time.Millisecond

// table reads AMQP headers as a consumer.Carrier (string values only).
type table amqp091.Table

func (t table) Get(key string) string {
	s, _ := t[key].(string)
	return s
}

func (t table) Keys() []string {
	out := make([]string, 0, len(t))
	for k := range t {
		out = append(out, k)
	}
	return out
}
