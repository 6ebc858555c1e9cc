package kafkaconf

import (
	"strings"

	"github.com/idemkit/idemkit/consumer"
	"github.com/twmb/franz-go/pkg/kgo"
)

// HeaderKeys calls set(i, key) for each record of recs that has the header name,
// with its value as the key. The keys are cut from one string: one allocation
// per fetch, not one per record.
func HeaderKeys(recs []*kgo.Record, name string, set func(i int, key consumer.Key)) {
	n := 0
	for _, rec := range recs {
		if v, ok := Header(rec, name); ok {
			n += len(v)
		}
	}
	var b strings.Builder
	b.Grow(n)
	for _, rec := range recs {
		if v, ok := Header(rec, name); ok {
			b.Write(v)
		}
	}
	all, at := b.String(), 0
	for i, rec := range recs {
		if v, ok := Header(rec, name); ok {
			set(i, consumer.Key(all[at:at+len(v)]))
			at += len(v)
		}
	}
}

// Header is the value of rec's first header called name.
func Header(rec *kgo.Record, name string) ([]byte, bool) {
	for _, h := range rec.Headers {
		if h.Key == name {
			return h.Value, true
		}
	}
	return nil, false
}
