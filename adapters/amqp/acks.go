package amqp

import (
	"fmt"

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

// acker acks settled tags: whatever is waiting is taken at once; the tags that
// extend the contiguous settled prefix are acked with one multiple-ack of the
// highest of them (every tag below it is settled), the others one by one.
func (f *flow[V, T]) acker() {
	defer close(f.done)
	batch := make([]uint64, 0, cap(f.acks))
	var settled []int64
	for tag := range f.acks {
		batch = append(batch[:0], tag)
		for more := true; more; {
			select {
			case t, ok := <-f.acks:
				if !ok {
					more = false
					break
				}
				batch = append(batch, t)
			default:
				more = false
			}
		}
		settled = settled[:0]
		for _, t := range batch {
			settled = append(settled, int64(t))
		}
		through, _ := f.tags.SettleAll(settled)
		var top, highest uint64
		var err error
		for _, t := range batch {
			highest = max(highest, t)
			switch {
			case int64(t) <= through:
				top = max(top, t)
			case err == nil:
				err = f.sub.Ack(t, false)
			}
		}
		if top > 0 && err == nil {
			err = f.sub.Ack(top, true)
		}
		if err != nil {
			f.failed(fmt.Errorf("amqp: ack: %w", err))
			continue
		}
		if f.w.hooks.ack {
			f.w.reportAck(consumer.AckEvent{Origin: consumer.Origin{Queue: f.w.topo.Queue, DeliveryTag: highest},
				Messages: len(batch)})
		}
	}
}

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
