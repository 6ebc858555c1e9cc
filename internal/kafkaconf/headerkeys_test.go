package kafkaconf_test

import (
	"testing"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/kafkaconf"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Each record with the header gets its first value as its key, one empty value
// included; the others get none.
func TestHeaderKeys(t *testing.T) {
	h := func(kv ...string) []kgo.RecordHeader {
		var out []kgo.RecordHeader
		for i := 0; i < len(kv); i += 2 {
			out = append(out, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return out
	}
	recs := []*kgo.Record{
		{Headers: h("Idempotency-Key", "order-1")},
		{Headers: h("other", "x")},
		{Headers: h("traceparent", "t", "Idempotency-Key", "order-3", "Idempotency-Key", "second")},
		{},
		{Headers: h("Idempotency-Key", "")},
		{Headers: h("Idempotency-Key", "order-6")},
	}
	got := map[int]consumer.Key{}
	kafkaconf.HeaderKeys(recs, "Idempotency-Key", func(i int, k consumer.Key) {
		if _, twice := got[i]; twice {
			t.Errorf("record %d keyed twice", i)
		}
		got[i] = k
	})
	want := map[int]consumer.Key{0: "order-1", 2: "order-3", 4: "", 5: "order-6"}
	if len(got) != len(want) {
		t.Fatalf("keys %v, want %v", got, want)
	}
	for i, k := range want {
		if g, ok := got[i]; !ok || g != k {
			t.Errorf("record %d: key %q (set %v), want %q", i, g, ok, k)
		}
	}
	if allocs := testing.AllocsPerRun(100, func() { kafkaconf.HeaderKeys(recs, "Idempotency-Key", func(int, consumer.Key) {}) }); allocs > 1 {
		t.Errorf("%.0f allocations for a fetch of %d records, want at most 1", allocs, len(recs))
	}
}
