package kafkashare_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// brokerLog is what the broker of a one-partition test receives, in the order it
// receives it: each terminal acknowledgement per offset (renewals left out) and
// each produce request that carries records.
type brokerLog struct {
	mu     sync.Mutex
	events []brokerEvent
}

type brokerEvent struct {
	produce bool          // a produce request; else an acknowledgement
	offset  int64         // the acknowledged record's
	status  kgo.AckStatus // accept, release or reject
}

// watchBroker records what c receives from now on. The test's own produce
// requests must come before it: after it, the only producer is the adapter's
// dead-letter copy.
func watchBroker(c *kfake.Cluster) *brokerLog {
	b := &brokerLog{}
	acks := func(batches []kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch) {
		for _, ab := range batches {
			for off := ab.FirstOffset; off <= ab.LastOffset; off++ {
				typ := ab.AcknowledgeTypes[0]
				if len(ab.AcknowledgeTypes) > 1 {
					typ = ab.AcknowledgeTypes[off-ab.FirstOffset]
				}
				if s := kgo.AckStatus(typ); s == kgo.AckAccept || s == kgo.AckRelease || s == kgo.AckReject {
					b.events = append(b.events, brokerEvent{offset: off, status: s})
				}
			}
		}
	}
	seen := func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		b.mu.Lock()
		defer b.mu.Unlock()
		switch r := req.(type) {
		case *kmsg.ProduceRequest:
			for _, t := range r.Topics {
				for _, p := range t.Partitions {
					if len(p.Records) > 0 {
						b.events = append(b.events, brokerEvent{produce: true})
					}
				}
			}
		case *kmsg.ShareAcknowledgeRequest:
			for _, t := range r.Topics {
				for _, p := range t.Partitions {
					acks(p.AcknowledgementBatches)
				}
			}
		case *kmsg.ShareFetchRequest:
			for _, t := range r.Topics {
				for _, p := range t.Partitions {
					batches := make([]kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch, len(p.AcknowledgementBatches))
					for i, ab := range p.AcknowledgementBatches {
						batches[i] = kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch{
							FirstOffset: ab.FirstOffset, LastOffset: ab.LastOffset, AcknowledgeTypes: ab.AcknowledgeTypes}
					}
					acks(batches)
				}
			}
		}
		return nil, nil, false
	}
	for _, k := range []kmsg.Key{kmsg.Produce, kmsg.ShareAcknowledge, kmsg.ShareFetch} {
		c.ControlKey(int16(k), seen)
	}
	return b
}

// statuses returns the acknowledgements the broker received for offset, in order.
func (b *brokerLog) statuses(offset int64) []kgo.AckStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []kgo.AckStatus
	for _, e := range b.events {
		if !e.produce && e.offset == offset {
			out = append(out, e.status)
		}
	}
	return out
}

// produced returns how many produce requests with records the broker received,
// and the position of the first among all events (-1 without one).
func (b *brokerLog) produced() (n, first int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	first = -1
	for i, e := range b.events {
		if e.produce {
			if n++; first < 0 {
				first = i
			}
		}
	}
	return n, first
}

// position returns where the first status acknowledgement of offset is among all
// events (-1 without one).
func (b *brokerLog) position(offset int64, status kgo.AckStatus) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, e := range b.events {
		if !e.produce && e.offset == offset && e.status == status {
			return i
		}
	}
	return -1
}

// endOffsets returns the sum of topic's end offsets: how many records were ever
// written to it.
func endOffsets(t *testing.T, brokers []string, topic string) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("end offset of %s: %v", topic, o.Err)
		}
		n += o.Offset
	})
	return n
}

// logCapture keeps the records logged through it.
type logCapture struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *logCapture) Enabled(context.Context, slog.Level) bool { return true }

func (l *logCapture) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Clone())
	return nil
}

func (l *logCapture) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCapture) WithGroup(string) slog.Handler      { return l }

// find returns the attributes of every record logged at level with message msg.
func (l *logCapture) find(level slog.Level, msg string) []map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]string
	for _, r := range l.recs {
		if r.Level != level || r.Message != msg {
			continue
		}
		attrs := map[string]string{}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
		out = append(out, attrs)
	}
	return out
}
