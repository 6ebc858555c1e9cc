package kafkashare_test

import (
	"context"
	"encoding/binary"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/kafkashare"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// brokerLog is what the broker of a one-partition test receives, in the order it
// receives it: each terminal acknowledgement per offset (renewals left out) and
// each record produced, with the offset its idemkit-original-offset header names
// (-1 without one, or in a compressed batch: give the adapter's clients
// kgo.ProducerBatchCompression(kgo.NoCompression()) to read them).
type brokerLog struct {
	mu     sync.Mutex
	events []brokerEvent
}

type brokerEvent struct {
	produce bool          // a record produced; else an acknowledgement
	offset  int64         // the acknowledged record's, or the one a produced copy names
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
					for _, off := range copiedOffsets(p.Records) {
						b.events = append(b.events, brokerEvent{produce: true, offset: off})
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

// copiedOffsets returns, for each record of the record batches in raw, the
// offset its idemkit-original-offset header names (-1 without one or when the
// batch is compressed).
func copiedOffsets(raw []byte) []int64 {
	var out []int64
	for len(raw) >= 12 {
		var batch kmsg.RecordBatch
		if err := batch.ReadFrom(raw); err != nil {
			return append(out, -1)
		}
		raw = raw[min(len(raw), 12+int(batch.Length)):]
		if batch.Attributes&0x07 != 0 {
			for range batch.NumRecords {
				out = append(out, -1)
			}
			continue
		}
		recs := batch.Records
		for range batch.NumRecords {
			n, w := binary.Varint(recs)
			if w <= 0 || len(recs) < w+int(n) {
				return append(out, -1)
			}
			var r kmsg.Record
			off := int64(-1)
			if r.ReadFrom(recs[:w+int(n)]) == nil {
				for _, h := range r.Headers {
					if h.Key == kafkashare.HeaderOriginalOffset {
						if v, err := strconv.ParseInt(string(h.Value), 10, 64); err == nil {
							off = v
						}
					}
				}
			}
			out = append(out, off)
			recs = recs[w+int(n):]
		}
	}
	return out
}

// produced returns how many records the broker was sent.
func (b *brokerLog) produced() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, e := range b.events {
		if e.produce {
			n++
		}
	}
	return n
}

// copied returns the position among all events of the first copy of offset (-1
// without one).
func (b *brokerLog) copied(offset int64) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, e := range b.events {
		if e.produce && e.offset == offset {
			return i
		}
	}
	return -1
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
