package replay

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/consumer"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// RabbitDeadLetter is what a RabbitMQ dead-letter copy's idemkit headers say
// about it.
type RabbitDeadLetter struct {
	Key consumer.Key
	// Queue is the work queue the message was consumed from; a redrive publishes
	// to it directly (the default exchange), so that a fan-out exchange does not
	// copy the message to its other queues again.
	Queue string
	// Exchange and RoutingKey are where the message was first published.
	Exchange, RoutingKey string
	// Kind is the machine-readable reason (x-idemkit-kind) or, from workers that do
	// not write it, the outcome (x-idemkit-outcome).
	Kind     string
	Attempts int
	Reason   string
}

// Dead-letter header names the RabbitMQ worker writes.
const (
	rdlKey      = "x-idemkit-key"
	rdlQueue    = "x-idemkit-original-queue"
	rdlExchange = "x-idemkit-original-exchange"
	rdlRouting  = "x-idemkit-original-routing-key"
	rdlKind     = "x-idemkit-kind"
	rdlOutcome  = "x-idemkit-outcome"
	rdlReason   = "x-idemkit-reason"
	rdlAttempts = "x-idemkit-attempts"
)

// ReadRabbitDeadLetter reads a RabbitMQ dead-letter copy's idemkit headers; it
// fails when the copy does not name its work queue.
func ReadRabbitDeadLetter(h map[string]string) (RabbitDeadLetter, error) {
	d := RabbitDeadLetter{Key: consumer.Key(h[rdlKey]), Queue: h[rdlQueue], Exchange: h[rdlExchange],
		RoutingKey: h[rdlRouting], Kind: h[rdlKind], Reason: h[rdlReason]}
	if d.Queue == "" {
		return d, fmt.Errorf("no %s header: not an idemkit dead letter", rdlQueue)
	}
	if d.Kind == "" {
		d.Kind = h[rdlOutcome]
	}
	d.Attempts, _ = strconv.Atoi(h[rdlAttempts])
	return d, nil
}

// RedriveRabbitMQ moves dead-lettered RabbitMQ messages from src (a RabbitSource
// over the dead-letter queue) back to the work queues they came from, published on
// a channel of its own on conn with publisher confirms, mandatory, with the
// message's body, properties and own headers (the idemkit dead-letter headers and
// the broker's x-death history dropped) and idemkit-replay-count raised by one. A
// copy leaves the dead-letter queue (is acked) only after the broker confirmed its
// republication; a crash between the two leaves it in both queues, and the store
// answers the second run as a DUPLICATE. What is not redriven (filtered, already
// done, not rerun, quarantined, invalid) stays in the dead-letter queue. The
// decisions, Rerun, the loop guard and the refusal of the default scope are
// RedriveKafka's.
func RedriveRabbitMQ(ctx context.Context, store admin.Store, src *RabbitSource, conn *amqp091.Connection, o RedriveOptions) (RedriveReport, error) {
	if src == nil || conn == nil || conn.IsClosed() {
		return RedriveReport{Counts: map[Verdict]int{}, Kinds: map[string]int{}}, configError("nil source, or no open connection")
	}
	var pub *rabbitPublisher // opened at the first copy to republish
	defer func() {
		if pub != nil {
			pub.close()
		}
	}()
	return redrive(ctx, store, src, o, func(r *redriver, msgs []Message) error {
		var out []Message
		var to []string
		for _, m := range msgs {
			r.rep.Read++
			d, err := ReadRabbitDeadLetter(m.Headers)
			_, ok := m.Raw.(amqp091.Delivery)
			switch {
			case err != nil || !ok || d.Key == "":
				r.rep.Counts[Invalid]++
				continue
			case !r.o.Filter.keep(m, d.Kind, d.Key):
				r.rep.Counts[Filtered]++
				continue
			}
			republish, err := r.decide(ctx, m, d.Kind, d.Key)
			if err != nil {
				return err
			}
			if republish {
				out, to = append(out, m), append(to, d.Queue)
			}
		}
		if len(out) == 0 {
			return nil
		}
		if pub == nil {
			var err error
			if pub, err = newRabbitPublisher(conn); err != nil {
				return err
			}
		}
		if err := pub.publish(ctx, out, to); err != nil {
			return err
		}
		return src.Ack(ctx, out)
	})
}

// rabbitPublisher republishes with confirms and mandatory routing.
type rabbitPublisher struct {
	conn    *amqp091.Connection
	ch      *amqp091.Channel
	returns chan amqp091.Return
	queues  map[string]bool // work queues known to exist
}

func newRabbitPublisher(conn *amqp091.Connection) (*rabbitPublisher, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("replay: redrive: open a channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("replay: redrive: publisher confirms: %w", err)
	}
	// Returns come before the confirm of the same message; the buffer holds a
	// whole batch's so that the broker's reader never waits on it.
	p := &rabbitPublisher{conn: conn, ch: ch, returns: ch.NotifyReturn(make(chan amqp091.Return, 1000)), queues: map[string]bool{}}
	return p, nil
}

func (p *rabbitPublisher) close() { _ = p.ch.Close() }

// publish republishes msgs to the queues to, and returns once the broker
// confirmed every one; it fails if any was refused or could not be routed.
func (p *rabbitPublisher) publish(ctx context.Context, msgs []Message, to []string) error {
	for _, q := range to {
		if !p.queues[q] {
			if err := p.checkQueue(q); err != nil {
				return err
			}
			p.queues[q] = true
		}
	}
	confirms := make([]*amqp091.DeferredConfirmation, len(msgs))
	for i, m := range msgs {
		c, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, "", to[i], true, false, republication(m))
		if err != nil {
			return fmt.Errorf("replay: redrive: publish to %q: %w", to[i], err)
		}
		confirms[i] = c
	}
	for i, c := range confirms {
		ok, err := c.WaitContext(ctx)
		if err != nil {
			return fmt.Errorf("replay: redrive: wait for the broker's confirm: %w", err)
		}
		if !ok {
			return fmt.Errorf("replay: redrive: the broker refused the copy for %q (nack): it stays in the dead-letter queue", to[i])
		}
	}
	select {
	case r := <-p.returns:
		return fmt.Errorf("replay: redrive: the broker could not route a copy to %q (%s): it stays in the dead-letter queue", r.RoutingKey, r.ReplyText)
	default:
	}
	return nil
}

// checkQueue fails unless queue exists, on a throwaway channel (a failed passive
// declare closes its channel).
func (p *rabbitPublisher) checkQueue(queue string) error {
	ch, err := p.conn.Channel()
	if err != nil {
		return fmt.Errorf("replay: redrive: open a channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	if _, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil); err != nil {
		return fmt.Errorf("%w: %q (%v); its dead letters stay where they are", errNoQueue, queue, err)
	}
	return nil
}

// republication is a dead-letter copy made fit for its work queue again.
func republication(m Message) amqp091.Publishing {
	d := m.Raw.(amqp091.Delivery)
	h := amqp091.Table{}
	for k, v := range d.Headers {
		if strings.HasPrefix(k, "x-idemkit-") || strings.HasPrefix(k, "x-death") || strings.HasPrefix(k, "x-first-death-") ||
			strings.HasPrefix(k, "x-last-death-") || k == HeaderReplayCount {
			continue
		}
		h[k] = v
	}
	h[HeaderReplayCount] = int32(replays(m) + 1)
	return amqp091.Publishing{Headers: h, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
		DeliveryMode: amqp091.Persistent, Priority: d.Priority, CorrelationId: d.CorrelationId, ReplyTo: d.ReplyTo,
		MessageId: d.MessageId, Timestamp: d.Timestamp, Type: d.Type, AppId: d.AppId, Body: d.Body}
}

// errNoQueue: a dead letter names a work queue the broker does not have.
var errNoQueue = errors.New("replay: redrive: the work queue does not exist")
