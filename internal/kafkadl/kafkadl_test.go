package kafkadl

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A tracer writes into a dead letter through SetHeader: it replaces the record's
// own trace headers and adds new ones, but never changes an idemkit header.
func TestSetHeaderKeepsIdemkitHeaders(t *testing.T) {
	rec := &kgo.Record{Topic: "payments", Partition: 3, Offset: 41, Key: []byte("k"), Value: []byte("v"),
		Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("old")}}}
	out := Record(rec, Copy{Topic: "payments.dlq", Key: "order-1", Attempts: 2, Outcome: "FAILED", Kind: "EXHAUSTED", Text: "boom"})
	SetHeader(out, "traceparent", "new")
	SetHeader(out, "tracestate", "a=b")
	SetHeader(out, HeaderAttempts, "99")
	SetHeader(out, HeaderKey, "other")
	want := []kgo.RecordHeader{
		{Key: "traceparent", Value: []byte("new")},
		{Key: HeaderOriginalTopic, Value: []byte("payments")},
		{Key: HeaderOriginalPartition, Value: []byte("3")},
		{Key: HeaderOriginalOffset, Value: []byte("41")},
		{Key: HeaderKey, Value: []byte("order-1")},
		{Key: HeaderAttempts, Value: []byte("2")},
		{Key: HeaderOutcome, Value: []byte("FAILED")},
		{Key: HeaderKind, Value: []byte("EXHAUSTED")},
		{Key: HeaderError, Value: []byte("boom")},
		{Key: "tracestate", Value: []byte("a=b")},
	}
	if len(out.Headers) != len(want) {
		t.Fatalf("%d headers, want %d: %v", len(out.Headers), len(want), out.Headers)
	}
	for i, h := range out.Headers {
		if h.Key != want[i].Key || string(h.Value) != string(want[i].Value) {
			t.Errorf("header %d = %s: %q, want %s: %q", i, h.Key, h.Value, want[i].Key, want[i].Value)
		}
	}
}
