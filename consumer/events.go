package consumer

import (
	"time"

	"github.com/idemkit/idemkit/internal/observe"
)

// Origin is where a broker adapter's message came from, on the events of its
// execution and of what the adapter does with it. It is zero for a message no
// broker delivered (a direct call, an HTTP request, replay).
type Origin struct {
	Topic     string // Kafka: the record's topic; "" for any other message
	Partition int32  // Kafka: its partition
	Offset    int64  // Kafka: its offset
	Queue     string // RabbitMQ: the queue the delivery came from; "" for any other message
	// DeliveryTag is RabbitMQ's tag of the delivery on its channel (from 1).
	DeliveryTag uint64
	// DeliveryCount is a Kafka share group's delivery count of the record (1 on its
	// first delivery); 0 for any other message.
	DeliveryCount int32
}

// originOf is the origin of the message an adapter put in m, if any.
func originOf(m *observe.Message) Origin {
	if m == nil {
		return Origin{}
	}
	return Origin(m.Origin)
}

// ClaimEvent describes one claim call. Its counts are those of the answer label.
type ClaimEvent struct {
	Scope                                      string
	Messages                                   int
	Claimed, Duplicates, InProgress, Conflicts int
	Errors                                     int // answered with an error (store unreachable, corrupt record, exhausted)
	// TakenOver counts the claims, among Claimed, that took a started record over:
	// its owner's lease had run out (the owner crashed or stalled) or, under
	// WithLock, its lock holder was gone (StatusTakenOver).
	TakenOver int
	Latency   time.Duration
}

// HandlerEvent describes a handler's run. Duration, Err and Kind are set at its end.
type HandlerEvent struct {
	Source   string // as in OutcomeEvent
	Scope    string
	Key      Key
	Origin   // where the message came from, when a broker adapter delivered it
	Attempt  int
	Fence    int64
	Duration time.Duration
	Err      error
	// Kind is ErrorKind(Err), or "" when the handler failed in nothing: it
	// returned nil, or ErrAlreadyApplied (it found its effect applied by an earlier
	// attempt, and the execution ends DUPLICATE).
	Kind string
}

// LeaseEvent describes a renewal call (Messages) or one lost lease (Key, Fence, Reason).
type LeaseEvent struct {
	Scope    string
	Messages int
	Key      Key
	Fence    int64
	Reason   string
	Latency  time.Duration
}

// SettleEvent describes one settle call.
type SettleEvent struct {
	Scope    string
	Messages int
	Latency  time.Duration
}

// OutcomeEvent describes an execution's outcome.
type OutcomeEvent struct {
	Source   string // who ran the execution: a Source constant, or a Pipeline's WithSource name
	Scope    string
	Key      Key
	Origin   // where the message came from, when a broker adapter delivered it
	Outcome  Outcome
	Action   Action
	Kind     string // ErrorKind of the result's error, "" without one
	Attempt  int
	Fence    int64
	Duration time.Duration // from the claim call to the settlement
	// Carrier holds the message's headers when a broker adapter delivered it, so
	// that a tracer can link an execution that ran no handler (a duplicate) to its
	// producer; nil otherwise. It reads the headers in place, so an observer
	// that keeps it keeps the whole delivered message in memory: copy what it
	// needs with Get instead.
	Carrier Carrier
}

// RetryEvent describes a retry an adapter scheduled.
type RetryEvent struct {
	Source  string
	Scope   string
	Key     Key
	Origin      // the message that failed
	Attempt int // the attempts the message used; 0 for a RabbitMQ delivery that was none
	Delay   time.Duration
	// Destination is the delayed-retry queue the copy went to (RabbitMQ); "" for
	// Kafka's retry in place.
	Destination string
	Kind        string
	Err         error
}

// DeadLetterEvent describes a confirmed dead-letter copy.
type DeadLetterEvent struct {
	Source      string
	Scope       string
	Key         Key    // for NO_KEY, what the message carried (often "")
	Origin             // the message copied
	Kind        string // DeadLetterKind, or UNDECODABLE or NO_KEY for a message that could not run
	Err         error  // why: the execution's error, or the decoding or key error
	Destination string // topic or queue
	BodyLess    bool   // the broker refused the full copy: the body was left out
}

// CommitEvent describes a committed offset, or a commit that failed.
type CommitEvent struct {
	Source string
	Scope  string // the store's scope (for Kafka, the consumer group's)
	Origin        // Topic, Partition and Offset: the offset committed (the next record to read)
	Lag    int64  // the partition's high watermark minus Offset when known, else -1
	// Err is set when the commit failed: the offset stays pending and is tried
	// again, unless the partition was revoked or lost meanwhile. Lag is -1 then.
	Err error
}

// AckEvent describes an acknowledgement.
type AckEvent struct {
	Source   string
	Scope    string
	Origin       // Queue, and the highest DeliveryTag it settled
	Messages int // how many deliveries it settled (a multiple-ack settles many)
}

// PauseEvent describes a source an adapter stopped taking messages from, or takes
// them from again.
type PauseEvent struct {
	Source string
	Scope  string
	Origin       // Topic (Kafka) or Queue (RabbitMQ)
	Err    error // why it paused; nil on resuming
}
