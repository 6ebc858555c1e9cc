package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ErrNoDeadLetterTopic is matched (errors.Is) by the error Run returns, and by the
// error of the consumer.PauseEvent observers are told, when a consumed topic's dead-letter topic does not
// exist and WithCreateDeadLetterTopics is not given.
var ErrNoDeadLetterTopic = errors.New("kafka: dead-letter topic does not exist")

// DeadLetterTopicError names a consumed topic whose dead-letter topic cannot be
// used: Err is ErrNoDeadLetterTopic when it does not exist, ErrConfig when its name
// cannot be used, or the broker's refusal (a kerr error such as
// TOPIC_AUTHORIZATION_FAILED) or the request's failure when it could not be
// described or created.
type DeadLetterTopicError struct {
	Topic      string // the consumed topic
	DeadLetter string // its dead-letter topic
	Err        error
	creating   bool   // Err is the refusal of a CreateTopics request
	misnamed   string // with ErrConfig: what is wrong with the name
}

// Error names both topics and says what to change.
func (e *DeadLetterTopicError) Error() string {
	head := fmt.Sprintf("kafka: dead-letter topic %q of %q", e.DeadLetter, e.Topic)
	switch {
	case errors.Is(e.Err, ErrNoDeadLetterTopic):
		return fmt.Sprintf("%s does not exist: create it (kafka-topics.sh --create --topic %s), name another with "+
			"WithDeadLetterTopic, or pass WithCreateDeadLetterTopics to have the consumer create it", head, e.DeadLetter)
	case errors.Is(e.Err, ErrConfig):
		return fmt.Sprintf("%s cannot be used: %s: give WithDeadLetterTopic another name", head, e.misnamed)
	case e.creating:
		return fmt.Sprintf("%s could not be created: %v: create it yourself, or let the consumer's principal create topics", head, e.Err)
	case errors.Is(e.Err, kerr.TopicAuthorizationFailed):
		return fmt.Sprintf("%s could not be described: %v: the consumer's principal needs DESCRIBE and WRITE on it", head, e.Err)
	}
	return fmt.Sprintf("%s could not be checked: %v", head, e.Err)
}

// Unwrap returns Err.
func (e *DeadLetterTopicError) Unwrap() error { return e.Err }

// ensureDeadLetterTopics checks that the dead-letter topic of each of topics exists
// and, with WithCreateDeadLetterTopics, creates those missing. It returns the
// topics whose dead-letter topic cannot be used; err is set when a request failed
// (the broker was not reached, ctx ended) and nothing was decided.
func (c *Consumer[V, T]) ensureDeadLetterTopics(ctx context.Context, topics []string) (bad map[string]*DeadLetterTopicError, err error) {
	bad = make(map[string]*DeadLetterTopicError)
	of := make(map[string][]string) // dead-letter topic -> the consumed topics it serves
	for _, t := range topics {
		dlq := c.cfg.DeadLetter(t)
		if why := c.misnamed(t, dlq); why != "" {
			bad[t] = &DeadLetterTopicError{Topic: t, DeadLetter: dlq, Err: ErrConfig, misnamed: why}
			continue
		}
		of[dlq] = append(of[dlq], t)
	}
	if len(of) == 0 {
		return bad, nil
	}
	names := make([]string, 0, len(of))
	for dlq := range of {
		names = append(names, dlq)
	}
	slices.Sort(names)
	found, err := c.describeTopics(ctx, names)
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, dlq := range names {
		switch ferr := found[dlq]; {
		case errors.Is(ferr, ErrNoDeadLetterTopic) && c.cfg.createDLQ:
			missing = append(missing, dlq)
		case ferr != nil:
			for _, t := range of[dlq] {
				bad[t] = &DeadLetterTopicError{Topic: t, DeadLetter: dlq, Err: ferr}
			}
		}
	}
	if len(missing) == 0 {
		return bad, nil
	}
	if err := c.createMissing(ctx, missing, of, bad); err != nil {
		return nil, err
	}
	return bad, nil
}

// createMissing creates the dead-letter topics missing and adds to bad the
// consumed topics (of says which) whose dead-letter topic could not be created.
func (c *Consumer[V, T]) createMissing(ctx context.Context, missing []string, of map[string][]string, bad map[string]*DeadLetterTopicError) error {
	created, err := c.createTopics(ctx, missing)
	if err != nil {
		return err
	}
	for _, dlq := range missing {
		if cerr := created[dlq]; cerr != nil {
			for _, t := range of[dlq] {
				bad[t] = &DeadLetterTopicError{Topic: t, DeadLetter: dlq, Err: cerr, creating: true}
			}
			continue
		}
		c.log.Info("kafka: dead-letter topic created", "dlq", dlq, "for", strings.Join(of[dlq], ","),
			"partitions", c.cfg.dlqPartitions, "replication", c.cfg.dlqReplication)
	}
	return nil
}

// describeTopics asks the cluster for names: nil for a topic that exists,
// ErrNoDeadLetterTopic for one that does not, the broker's error otherwise. With
// kgo.AllowAutoTopicCreation in the client's options, the request lets the broker
// create them (when its auto.create.topics.enable allows), as a produce would.
func (c *Consumer[V, T]) describeTopics(ctx context.Context, names []string) (map[string]error, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = c.autoCreate
	for _, n := range names {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(n)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return nil, err
	}
	out := make(map[string]error, len(names))
	for _, n := range names {
		out[n] = ErrNoDeadLetterTopic // not in the answer: not there
	}
	for _, rt := range resp.Topics {
		if rt.Topic == nil {
			continue
		}
		switch err := kerr.ErrorForCode(rt.ErrorCode); {
		case err == nil, errors.Is(err, kerr.LeaderNotAvailable): // exists (a new topic has no leader yet)
			out[*rt.Topic] = nil
		case errors.Is(err, kerr.UnknownTopicOrPartition):
			out[*rt.Topic] = ErrNoDeadLetterTopic
		default:
			out[*rt.Topic] = err
		}
	}
	return out, nil
}

// createTopics creates names with WithCreateDeadLetterTopics' partitions and
// replication: nil for a topic created or already there, the broker's error
// otherwise.
func (c *Consumer[V, T]) createTopics(ctx context.Context, names []string) (map[string]error, error) {
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 10_000
	for _, n := range names {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic = n
		rt.NumPartitions = c.cfg.dlqPartitions
		rt.ReplicationFactor = c.cfg.dlqReplication
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return nil, err
	}
	out := make(map[string]error, len(names))
	for _, n := range names {
		out[n] = errors.New("the broker did not answer for it")
	}
	for _, rt := range resp.Topics {
		err := kerr.ErrorForCode(rt.ErrorCode)
		if errors.Is(err, kerr.TopicAlreadyExists) { // another member was first
			err = nil
		}
		if err != nil && rt.ErrorMessage != nil {
			err = fmt.Errorf("%w (%s)", err, *rt.ErrorMessage)
		}
		out[rt.Topic] = err
	}
	return out, nil
}

// misnamed says what is wrong with dlq as the dead-letter topic of topic, or "".
// With kgo.ConsumeRegex, a dead-letter topic the patterns match would be consumed
// too (and, created by WithCreateDeadLetterTopics, would call for a dead-letter
// topic of its own, and so on).
func (c *Consumer[V, T]) misnamed(topic, dlq string) string {
	switch {
	case dlq == "":
		return "the name is empty"
	case dlq == topic:
		return "it is the topic itself"
	case c.consumes(dlq):
		return "the consumer's kgo.ConsumeRegex patterns match it, so it would be consumed too"
	}
	return ""
}

// consumes reports whether the consumer's regular expressions select topic.
func (c *Consumer[V, T]) consumes(topic string) bool {
	for _, re := range c.excludes {
		if re.MatchString(topic) {
			return false
		}
	}
	for _, re := range c.patterns {
		if re.MatchString(topic) {
			return true
		}
	}
	return false
}
