package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/idemkit/idemkit/consumer"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Acknowledger is a Source whose messages leave it once settled: a queue. Execute
// acks each message whose effect is recorded (RAN, DUPLICATE) after its batch; the
// source hands every other message back to its queue when closed. Such a source is
// its own checkpoint, so Execute refuses WithCheckpoint with it.
type Acknowledger interface {
	Ack(ctx context.Context, done []Message) error
}

// RabbitOption configures a RabbitSource. Every option states its default.
type RabbitOption interface{ applyRabbit(*rabbitConfig) }

type rabbitOptFunc func(*rabbitConfig)

func (f rabbitOptFunc) applyRabbit(c *rabbitConfig) { f(c) }

type rabbitConfig struct {
	keyHeader string
	keyFunc   func(amqp091.Delivery) (consumer.Key, error)
	prefetch  int
	idle      time.Duration
}

// RabbitKeyHeader reads a message's key from the named header, as the RabbitMQ
// worker's WithKeyHeader does. Default: the message's MessageId property.
func RabbitKeyHeader(name string) RabbitOption {
	return rabbitOptFunc(func(c *rabbitConfig) { c.keyHeader = name })
}

// RabbitKeyFunc computes a message's key; it replaces the header and MessageId.
// Default: none.
func RabbitKeyFunc(fn func(amqp091.Delivery) (consumer.Key, error)) RabbitOption {
	return rabbitOptFunc(func(c *rabbitConfig) { c.keyFunc = fn })
}

// RabbitPrefetch bounds how many messages the source holds unacked. Default 0:
// no bound, because a plan acks nothing and would stop at any bound below the
// queue's length; the source then holds every message it read (bodies included)
// until it acks or closes. Set it for executions over queues too large for memory:
// a plan over such a source stops, with an error, at the bound.
func RabbitPrefetch(n int) RabbitOption {
	return rabbitOptFunc(func(c *rabbitConfig) { c.prefetch = n })
}

// RabbitIdle is how long Read waits for a delivery before it takes the queue as
// drained (other consumers may hold the rest). Default 2s.
func RabbitIdle(d time.Duration) RabbitOption {
	return rabbitOptFunc(func(c *rabbitConfig) { c.idle = d })
}

// RabbitSource reads the messages a RabbitMQ queue holds when it is opened, in
// queue order. It consumes them with manual acks on a channel of its own and acks
// only what its Acknowledger caller says is done; Close returns the rest to the
// queue (they come back marked redelivered, and a quorum queue may count the
// return as a delivery).
type RabbitSource struct {
	cfg        rabbitConfig
	ch         *amqp091.Channel
	queue      string
	name       string
	total      int
	read       int
	deliveries <-chan amqp091.Delivery
	closed     chan *amqp091.Error
}

// OpenRabbitMQ opens a source over queue on conn. The range is the messages in the
// queue at this moment (its message count); messages published later are not read.
func OpenRabbitMQ(conn *amqp091.Connection, queue string, opts ...RabbitOption) (*RabbitSource, error) {
	if conn == nil || conn.IsClosed() {
		return nil, configError("a RabbitMQ source needs an open connection")
	}
	if queue == "" {
		return nil, configError("a RabbitMQ source needs a queue name")
	}
	c := rabbitConfig{idle: 2 * time.Second}
	for _, o := range opts {
		o.applyRabbit(&c)
	}
	if c.prefetch < 0 || c.idle <= 0 {
		return nil, configError("RabbitPrefetch must be 0 (no bound) or more and RabbitIdle above 0: got %d and %v", c.prefetch, c.idle)
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("replay: open a channel: %w", err)
	}
	q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	if err != nil {
		return nil, fmt.Errorf("replay: queue %q: %w", queue, err)
	}
	if err := ch.Qos(c.prefetch, 0, false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("replay: set the prefetch: %w", err)
	}
	s := &RabbitSource{cfg: c, ch: ch, queue: queue, name: "rabbitmq:" + queue, total: q.Messages,
		closed: ch.NotifyClose(make(chan *amqp091.Error, 1))}
	if s.total == 0 {
		return s, nil
	}
	s.deliveries, err = ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("replay: consume %q: %w", queue, err)
	}
	return s, nil
}

// Name names the source for reports and checkpoints.
func (s *RabbitSource) Name() string { return s.name }

// Total is the number of messages the queue held when the source was opened.
func (s *RabbitSource) Total() int64 { return int64(s.total) }

// Read returns up to max next messages; io.EOF once it has read the queue's
// message count, or when no delivery came for RabbitIdle.
func (s *RabbitSource) Read(ctx context.Context, max int) ([]Message, error) {
	if s.read >= s.total {
		return nil, io.EOF
	}
	var out []Message
	idle := time.NewTimer(s.cfg.idle)
	defer idle.Stop()
	for len(out) < max && s.read < s.total {
		if len(out) > 0 { // return what has arrived; the next Read waits
			select {
			case d, ok := <-s.deliveries:
				if !ok {
					return out, s.lost()
				}
				out = append(out, s.message(d))
				s.read++
				continue
			default:
				return out, nil
			}
		}
		select {
		case d, ok := <-s.deliveries:
			if !ok {
				return out, s.lost()
			}
			out = append(out, s.message(d))
			s.read++
		case <-idle.C:
			if s.cfg.prefetch > 0 && s.read >= s.cfg.prefetch {
				return nil, fmt.Errorf("replay: %s: no delivery beyond the %d the prefetch allows unacked; a plan over this queue needs RabbitPrefetch(0)", s.name, s.cfg.prefetch)
			}
			s.total = s.read // drained: other consumers hold the rest
			return nil, io.EOF
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
	if s.read >= s.total {
		return out, io.EOF
	}
	return out, nil
}

func (s *RabbitSource) lost() error {
	select {
	case e := <-s.closed:
		if e != nil {
			return fmt.Errorf("replay: %s: channel closed: %w", s.name, e)
		}
	default:
	}
	return fmt.Errorf("replay: %s: the broker ended the consumer", s.name)
}

func (s *RabbitSource) message(d amqp091.Delivery) Message {
	m := Message{Payload: d.Body, Partition: s.queue, Offset: int64(s.read), Time: d.Timestamp, Raw: d}
	if len(d.Headers) > 0 {
		m.Headers = make(map[string]string, len(d.Headers))
		for k, v := range d.Headers {
			if t, ok := headerText(v); ok {
				m.Headers[k] = t
			}
		}
	}
	switch {
	case s.cfg.keyFunc != nil:
		m.Key, m.KeyErr = s.cfg.keyFunc(d)
	case s.cfg.keyHeader != "":
		k, ok := m.Headers[s.cfg.keyHeader]
		if !ok {
			m.KeyErr = fmt.Errorf("no %s header", s.cfg.keyHeader)
		}
		m.Key = consumer.Key(k)
	default:
		if d.MessageId == "" {
			m.KeyErr = errors.New("no message id")
		}
		m.Key = consumer.Key(d.MessageId)
	}
	return m
}

// headerText renders a header value as text; tables and arrays are left out.
func headerText(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case []byte:
		return string(x), true
	case int8, int16, int32, int64, int, uint8, uint16, uint32, uint64:
		return fmt.Sprint(x), true
	case bool:
		return strconv.FormatBool(x), true
	case float32, float64:
		return fmt.Sprint(x), true
	case time.Time:
		return x.UTC().Format(time.RFC3339), true
	}
	return "", false
}

// Ack removes done from the queue.
func (s *RabbitSource) Ack(_ context.Context, done []Message) error {
	for _, m := range done {
		d, ok := m.Raw.(amqp091.Delivery)
		if !ok {
			return fmt.Errorf("replay: %s: ack of a message it did not read", s.name)
		}
		if err := s.ch.Ack(d.DeliveryTag, false); err != nil {
			return fmt.Errorf("replay: %s: ack: %w", s.name, err)
		}
	}
	return nil
}

// Close closes the source's channel: every message it read and did not ack goes
// back to the queue.
func (s *RabbitSource) Close() error {
	if s.ch.IsClosed() {
		return nil
	}
	return s.ch.Close()
}

var _ Acknowledger = (*RabbitSource)(nil)
