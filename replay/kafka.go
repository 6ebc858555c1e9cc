package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Bound is one end of a Kafka range in every partition: an offset, or the first
// offset at or after a time. The zero Bound is the log's start (as From) or its end
// when the source was opened (as To).
type Bound struct {
	offset int64
	time   time.Time
	set    bool
}

// AtOffset is the bound at offset o in every partition.
func AtOffset(o int64) Bound { return Bound{offset: o, set: true} }

// AtTime is the bound at the first record produced at or after t in every partition.
func AtTime(t time.Time) Bound { return Bound{time: t, set: true} }

func (b Bound) String() string {
	switch {
	case !b.set:
		return ""
	case !b.time.IsZero():
		return b.time.UTC().Format(time.RFC3339)
	}
	return strconv.FormatInt(b.offset, 10)
}

// KafkaRange is the part of a topic to replay: in each partition, the records from
// From (inclusive) to To (exclusive).
type KafkaRange struct {
	Topic string
	// Partitions to read; nil reads every partition.
	Partitions []int32
	From, To   Bound
	// Offsets overrides From and To per partition: [from, to) offsets.
	Offsets map[int32][2]int64
}

// KafkaOption configures a KafkaSource. Every option states its default.
type KafkaOption interface{ applyKafka(*kafkaConfig) }

type kafkaOptFunc func(*kafkaConfig)

func (f kafkaOptFunc) applyKafka(c *kafkaConfig) { f(c) }

type kafkaConfig struct {
	keyHeader string
	keyFunc   func(*kgo.Record) (consumer.Key, error)
	resume    *Checkpoint
}

// KeyHeader reads a record's key from the named header, as the Kafka adapter's
// WithKeyHeader does. Default "Idempotency-Key".
func KeyHeader(name string) KafkaOption {
	return kafkaOptFunc(func(c *kafkaConfig) { c.keyHeader = name })
}

// KeyFunc computes a record's key, as the Kafka adapter's WithKeyFunc does; it
// replaces the header. Default: none.
func KeyFunc(fn func(*kgo.Record) (consumer.Key, error)) KafkaOption {
	return kafkaOptFunc(func(c *kafkaConfig) { c.keyFunc = fn })
}

// ResumeFrom starts each partition at the checkpoint's offset when it is past the
// range's start, so that a resumed replay does not read the settled part again.
// Default: the range's start.
func ResumeFrom(cp Checkpoint) KafkaOption {
	return kafkaOptFunc(func(c *kafkaConfig) { c.resume = &cp })
}

// KafkaSource reads a range of a Kafka topic with franz-go, each partition in
// offset order. It ends when it has read the record just before each partition's
// To offset; a range whose last offset holds no record (compacted away, or a
// transaction marker) ends only when a later record of that partition arrives.
type KafkaSource struct {
	cl      *kgo.Client
	cfg     kafkaConfig
	topic   string
	name    string
	end     map[int32]int64 // exclusive
	pending map[int32]bool  // partitions not yet at their end
	// Ranges are the [from, to) offsets read in each partition.
	Ranges map[int32][2]int64
}

// OpenKafka resolves r's bounds to offsets and starts reading. clientOpts are the
// franz-go options for the cluster (kgo.SeedBrokers, kgo.DialTLSConfig, kgo.SASL,
// ...); consumption options are the source's own.
func OpenKafka(ctx context.Context, clientOpts []kgo.Opt, r KafkaRange, opts ...KafkaOption) (*KafkaSource, error) {
	cfg := kafkaConfig{keyHeader: "Idempotency-Key"}
	for _, o := range opts {
		if o == nil {
			return nil, configError("nil Kafka option")
		}
		o.applyKafka(&cfg)
	}
	if r.Topic == "" {
		return nil, configError("no topic: give KafkaRange.Topic")
	}
	if cfg.keyFunc == nil && cfg.keyHeader == "" {
		return nil, configError("empty key header: omit KeyHeader for Idempotency-Key, or give KeyFunc")
	}
	admCl, err := kgo.NewClient(clientOpts...)
	if err != nil {
		return nil, fmt.Errorf("replay: kafka client: %w", err)
	}
	adm := kadm.NewClient(admCl)
	defer adm.Close()
	starts, err := adm.ListStartOffsets(ctx, r.Topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("replay: list the start offsets of %s: %w", r.Topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, r.Topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("replay: list the end offsets of %s: %w", r.Topic, err)
	}
	if len(starts[r.Topic]) == 0 {
		return nil, fmt.Errorf("replay: topic %q does not exist or has no partitions", r.Topic)
	}
	at := func(b Bound, dflt kadm.ListedOffsets) (kadm.ListedOffsets, error) {
		if !b.set || b.time.IsZero() {
			return dflt, nil
		}
		l, err := adm.ListOffsetsAfterMilli(ctx, b.time.UnixMilli(), r.Topic)
		if err == nil {
			err = l.Error()
		}
		return l, err
	}
	fromT, err := at(r.From, starts)
	if err != nil {
		return nil, fmt.Errorf("replay: offsets of %s at %s: %w", r.Topic, r.From, err)
	}
	toT, err := at(r.To, ends)
	if err != nil {
		return nil, fmt.Errorf("replay: offsets of %s at %s: %w", r.Topic, r.To, err)
	}
	parts := r.Partitions
	if parts == nil {
		for p := range starts[r.Topic] {
			if p >= 0 {
				parts = append(parts, p)
			}
		}
		slices.Sort(parts)
	}
	s := &KafkaSource{cfg: cfg, topic: r.Topic, end: map[int32]int64{}, pending: map[int32]bool{}, Ranges: map[int32][2]int64{}}
	consume := map[int32]kgo.Offset{}
	for _, p := range parts {
		lo, ok1 := starts.Lookup(r.Topic, p)
		hi, ok2 := ends.Lookup(r.Topic, p)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("replay: topic %s has no partition %d", r.Topic, p)
		}
		from, to := lo.Offset, hi.Offset
		if r.From.set {
			if r.From.time.IsZero() {
				from = r.From.offset
			} else if o, ok := fromT.Lookup(r.Topic, p); ok {
				from = o.Offset
			}
		}
		if r.To.set {
			if r.To.time.IsZero() {
				to = r.To.offset
			} else if o, ok := toT.Lookup(r.Topic, p); ok {
				to = o.Offset
			}
		}
		if o, ok := r.Offsets[p]; ok {
			from, to = o[0], o[1]
		}
		from, to = max(from, lo.Offset), min(to, hi.Offset)
		if cfg.resume != nil {
			if next, ok := cfg.resume.Next[partitionName(r.Topic, p)]; ok {
				from = max(from, next)
			}
		}
		s.Ranges[p] = [2]int64{from, max(to, from)}
		if from < to {
			s.end[p], s.pending[p] = to, true
			consume[p] = kgo.NewOffset().At(from)
		}
	}
	s.name = "kafka:" + r.Topic
	if r.Partitions != nil {
		ps := make([]string, len(parts))
		for i, p := range parts {
			ps[i] = strconv.Itoa(int(p))
		}
		s.name += "[" + strings.Join(ps, ",") + "]"
	}
	if len(consume) == 0 {
		return s, nil
	}
	s.cl, err = kgo.NewClient(append(slices.Clone(clientOpts),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{r.Topic: consume}))...)
	if err != nil {
		return nil, fmt.Errorf("replay: kafka client: %w", err)
	}
	return s, nil
}

func partitionName(topic string, p int32) string { return topic + "/" + strconv.Itoa(int(p)) }

// Name is "kafka:<topic>", with the partitions when the range names them.
func (s *KafkaSource) Name() string { return s.name }

// Total is how many offsets the range spans (records, less any compacted away).
func (s *KafkaSource) Total() int64 {
	var n int64
	for _, r := range s.Ranges {
		n += r[1] - r[0]
	}
	return n
}

// Close closes the client.
func (s *KafkaSource) Close() error {
	if s.cl != nil {
		s.cl.Close()
	}
	return nil
}

// Read returns up to max next records of the range.
func (s *KafkaSource) Read(ctx context.Context, max int) ([]Message, error) {
	if len(s.pending) == 0 {
		return nil, io.EOF
	}
	fs := s.cl.PollRecords(ctx, max)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var ferr error
	fs.EachError(func(t string, p int32, err error) {
		if !errors.Is(err, context.Canceled) && ferr == nil {
			ferr = fmt.Errorf("fetch %s/%d: %w", t, p, err)
		}
	})
	if ferr != nil {
		return nil, ferr
	}
	var out []Message
	var done []int32
	fs.EachRecord(func(rec *kgo.Record) {
		end, ok := s.end[rec.Partition]
		if !ok || !s.pending[rec.Partition] || rec.Offset >= end {
			return
		}
		out = append(out, s.message(rec))
		if rec.Offset+1 >= end {
			delete(s.pending, rec.Partition)
			done = append(done, rec.Partition)
		}
	})
	if len(done) > 0 {
		s.cl.PauseFetchPartitions(map[string][]int32{s.topic: done})
	}
	if len(out) == 0 && len(s.pending) == 0 {
		return nil, io.EOF
	}
	return out, nil
}

func (s *KafkaSource) message(rec *kgo.Record) Message {
	m := Message{Payload: rec.Value, Partition: partitionName(rec.Topic, rec.Partition), Offset: rec.Offset, Time: rec.Timestamp, Raw: rec}
	if len(rec.Headers) > 0 {
		m.Headers = make(map[string]string, len(rec.Headers))
		for _, h := range rec.Headers {
			m.Headers[h.Key] = string(h.Value)
		}
	}
	if s.cfg.keyFunc != nil {
		m.Key, m.KeyErr = s.cfg.keyFunc(rec)
		return m
	}
	k, ok := m.Headers[s.cfg.keyHeader]
	if !ok || k == "" {
		m.KeyErr = fmt.Errorf("no %s header: name the header the consumer reads its keys from", s.cfg.keyHeader)
		return m
	}
	m.Key = consumer.Key(k)
	return m
}
