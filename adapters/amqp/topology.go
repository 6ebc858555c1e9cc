package amqp

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Topology names the queues of one worker pool.
type Topology struct {
	// Queue is the work queue. Required.
	Queue string
	// Quorum declares quorum queues instead of classic ones. Default false.
	Quorum bool
	// RetryDelays are the delays of the delayed-retry queues; retry n waits
	// RetryDelays[min(n, len)-1]. Default 1s, 5s, 30s, 2m.
	RetryDelays []time.Duration
	// DeadLetterQueue receives what cannot be processed. Default Queue + ".dlq".
	DeadLetterQueue string
}

var defaultRetryDelays = []time.Duration{time.Second, 5 * time.Second, 30 * time.Second, 2 * time.Minute}

func (t Topology) withDefaults() Topology {
	if len(t.RetryDelays) == 0 {
		t.RetryDelays = defaultRetryDelays
	}
	if t.DeadLetterQueue == "" {
		t.DeadLetterQueue = t.Queue + ".dlq"
	}
	return t
}

func (t Topology) validate() error {
	t = t.withDefaults()
	switch {
	case t.Queue == "":
		return configError("Topology.Queue is empty: name the work queue")
	case t.DeadLetterQueue == t.Queue:
		return configError("Topology.DeadLetterQueue equals the work queue: give it another name")
	}
	for _, d := range t.RetryDelays {
		if d < time.Millisecond || d%time.Millisecond != 0 {
			return configError("retry delay %v: give whole milliseconds, at least 1ms", d)
		}
	}
	return nil
}

// RetryQueue is the name of the delayed-retry queue for delay d: <queue>.retry.<d>.
func (t Topology) RetryQueue(d time.Duration) string {
	return t.Queue + ".retry." + d.String()
}

// retryQueueFor picks the retry queue of retry n (from 1), or the shortest delay
// not under wait when wait > 0.
func (t Topology) retryDelay(n int, wait time.Duration) time.Duration {
	t = t.withDefaults()
	if wait > 0 {
		for _, d := range t.RetryDelays {
			if d >= wait {
				return d
			}
		}
	}
	return t.RetryDelays[min(max(n, 1), len(t.RetryDelays))-1]
}

// TopologyConflictError: a queue exists with arguments other than the ones the
// topology declares.
type TopologyConflictError struct {
	Queue    string
	Argument string // the argument the broker named, e.g. x-queue-type
	Reason   string // the broker's words
}

func (e *TopologyConflictError) Error() string {
	return fmt.Sprintf("amqp: queue %q exists with a different %s: %s (delete it, or declare the topology it was made with)",
		e.Queue, e.Argument, e.Reason)
}

var inequivalent = regexp.MustCompile(`inequivalent arg '([^']+)'`)

func (t Topology) queueArgs() amqp091.Table {
	if t.Quorum {
		return amqp091.Table{"x-queue-type": "quorum"}
	}
	return amqp091.Table{}
}

// Declare declares the work queue, the delayed-retry queues and the dead-letter
// queue on conn. It is idempotent; a queue that exists with other arguments gives a
// *TopologyConflictError.
func (t Topology) Declare(conn *amqp091.Connection) error {
	if err := t.validate(); err != nil {
		return err
	}
	t = t.withDefaults()
	type decl struct {
		name string
		args amqp091.Table
	}
	work := t.queueArgs()
	if t.Quorum {
		// A quorum queue drops a message past its delivery limit (20 by default on
		// RabbitMQ 4): dead-letter it instead, at least once.
		work["x-dead-letter-exchange"] = ""
		work["x-dead-letter-routing-key"] = t.DeadLetterQueue
		work["x-dead-letter-strategy"] = "at-least-once"
		work["x-overflow"] = "reject-publish"
	}
	decls := []decl{{t.Queue, work}, {t.DeadLetterQueue, t.queueArgs()}}
	for _, d := range t.RetryDelays {
		args := t.queueArgs()
		args["x-message-ttl"] = d.Milliseconds()
		args["x-dead-letter-exchange"] = ""
		args["x-dead-letter-routing-key"] = t.Queue
		if t.Quorum {
			args["x-dead-letter-strategy"] = "at-least-once"
			args["x-overflow"] = "reject-publish"
		}
		decls = append(decls, decl{t.RetryQueue(d), args})
	}
	for _, d := range decls {
		ch, err := conn.Channel() // a refused declare closes its channel
		if err != nil {
			return err
		}
		_, err = ch.QueueDeclare(d.name, true, false, false, false, d.args)
		var aerr *amqp091.Error
		if errors.As(err, &aerr) && aerr.Code == amqp091.PreconditionFailed {
			arg := "argument"
			if m := inequivalent.FindStringSubmatch(aerr.Reason); m != nil {
				arg = m[1]
			}
			return &TopologyConflictError{Queue: d.name, Argument: arg, Reason: strings.TrimSpace(aerr.Reason)}
		}
		if err != nil {
			return fmt.Errorf("amqp: declare queue %q: %w", d.name, err)
		}
		_ = ch.Close()
	}
	return nil
}

// verify checks that every queue of the topology exists (without declaring it).
func (t Topology) verify(conn *amqp091.Connection) error {
	t = t.withDefaults()
	for _, name := range t.names() {
		ch, err := conn.Channel() // a failed passive declare closes its channel
		if err != nil {
			return err
		}
		_, err = ch.QueueDeclarePassive(name, true, false, false, false, nil)
		var aerr *amqp091.Error
		if errors.As(err, &aerr) && aerr.Code == amqp091.NotFound {
			return fmt.Errorf("amqp: queue %q does not exist: declare the topology (WithDeclare(true), or Topology.Declare)", name)
		}
		if err != nil {
			return fmt.Errorf("amqp: inspect queue %q: %w", name, err)
		}
		_ = ch.Close()
	}
	return nil
}

// names lists the topology's queues: the work queue, the dead-letter queue and
// the retry queues.
func (t Topology) names() []string {
	names := []string{t.Queue, t.DeadLetterQueue}
	for _, d := range t.RetryDelays {
		names = append(names, t.RetryQueue(d))
	}
	return names
}

// Delete removes every queue of the topology (tests, tear-down).
func (t Topology) Delete(conn *amqp091.Connection) error {
	t = t.withDefaults()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	for _, n := range t.names() {
		if _, err := ch.QueueDelete(n, false, false, false); err != nil {
			return err
		}
	}
	return nil
}
