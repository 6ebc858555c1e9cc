package amqp_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	idemamqp "github.com/idemkit/idemkit/adapters/amqp"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// producerTrace is the W3C trace context a producer put on its message.
const producerTrace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// seen keeps the headers of every run of a handler, by key, in run order.
type seen struct {
	mu   sync.Mutex
	runs map[string][]amqp091.Table
}

func (s *seen) add(key string, h amqp091.Table) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runs == nil {
		s.runs = map[string][]amqp091.Table{}
	}
	s.runs[key] = append(s.runs[key], h)
}

func (s *seen) of(key string) []amqp091.Table {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs[key]
}

// withoutBroker is h without the headers the broker adds when a message
// dead-letters out of a retry queue (x-death, x-first-death-*, x-last-death-*).
func withoutBroker(h amqp091.Table) amqp091.Table {
	out := amqp091.Table{}
	for k, v := range h {
		if k == "x-death" || strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-") {
			continue
		}
		out[k] = v
	}
	return out
}

// Without a tracer, a retry copy and a dead-letter copy carry the delivered
// message's headers as they came, its trace context among them, whatever that
// header holds (a W3C traceparent, text that is none, a number), and the idemkit
// headers exactly as before: each message is copied, acked and run the exact
// number of times, nothing is lost.
func TestCopiesCarryTheDeliveredTraceContext(t *testing.T) {
	url := testenv.AMQP(t)
	hooks := &acks{}
	store, _, _ := newStore(t, consumer.WithMaxAttempts(2), consumer.WithObserver(hooks))
	topo := topology(t, url, false)
	runs := &seen{}
	w, err := idemamqp.NewTypedWorker(store, url, topo, decodeOrder,
		func(ctx context.Context, o order, d amqp091.Delivery) (string, error) {
			runs.add(o.ID, d.Headers)
			return "", errors.New("warehouse API timed out")
		})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name        string
		traceparent any
	}{
		{"w3c", producerTrace},
		{"malformed", "not-a-traceparent"},
		{"number", int32(7)},
	}
	for _, tc := range cases {
		h := amqp091.Table{"traceparent": tc.traceparent, "tracestate": "vendor=1", "tenant": "acme"}
		publishRaw(t, url, topo.Queue,
			amqp091.Publishing{MessageId: "poison-" + tc.name, Headers: h, Body: []byte(`{"id":"poison-` + tc.name + `","items":1}`)},
			amqp091.Publishing{MessageId: "garbled-" + tc.name, Headers: h, Body: []byte(`{not json`)})
	}
	r := start(t, w)
	n := int64(len(cases))
	testenv.Eventually(t, 30*time.Second, "every message dead-lettered and acked", func() bool {
		return hooks.dead.Load() == 2*n && hooks.acked.Load() == 3*n
	})
	r.stop()
	if hooks.retries.Load() != n || hooks.dead.Load() != 2*n || hooks.acked.Load() != 3*n {
		t.Fatalf("%d retries, %d dead letters, %d acked; want %d, %d and %d",
			hooks.retries.Load(), hooks.dead.Load(), hooks.acked.Load(), n, 2*n, 3*n)
	}
	if q, rq := depth(t, url, topo.Queue), depth(t, url, topo.RetryQueue(topo.RetryDelays[0])); q != 0 || rq != 0 {
		t.Fatalf("queue depth %d, retry queue depth %d; want 0 and 0", q, rq)
	}
	dead := map[string]amqp091.Delivery{}
	for _, d := range drain(t, url, topo.DeadLetterQueue) {
		dead[d.MessageId] = d
	}
	if len(dead) != 2*len(cases) {
		t.Fatalf("%d dead letters in the queue, want %d", len(dead), 2*len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			poison, garbled := "poison-"+tc.name, "garbled-"+tc.name
			got := runs.of(poison)
			if len(got) != 2 {
				t.Fatalf("%s ran %d times, want 2", poison, len(got))
			}
			own := amqp091.Table{"traceparent": tc.traceparent, "tracestate": "vendor=1", "tenant": "acme"}
			// The second run's delivery is the retry copy.
			want := amqp091.Table{"traceparent": tc.traceparent, "tracestate": "vendor=1", "tenant": "acme",
				idemamqp.HeaderAttempts: int32(1), idemamqp.HeaderOriginalExch: "", idemamqp.HeaderOriginalRouting: topo.Queue}
			if !reflect.DeepEqual(got[0], own) {
				t.Errorf("first run's headers %v, want the message's own %v", got[0], own)
			}
			if h := withoutBroker(got[1]); !reflect.DeepEqual(h, want) {
				t.Errorf("retry copy's headers %v, want %v", h, want)
			}
			want = amqp091.Table{"traceparent": tc.traceparent, "tracestate": "vendor=1", "tenant": "acme",
				idemamqp.HeaderAttempts: int32(2), idemamqp.HeaderOutcome: "ERROR", idemamqp.HeaderKind: "EXHAUSTED",
				idemamqp.HeaderKey: poison, idemamqp.HeaderOriginalQueue: topo.Queue,
				idemamqp.HeaderReason:       "consumer: attempts exhausted after 2 attempts: warehouse API timed out",
				idemamqp.HeaderOriginalExch: "", idemamqp.HeaderOriginalRouting: topo.Queue}
			if h := withoutBroker(dead[poison].Headers); !reflect.DeepEqual(h, want) {
				t.Errorf("exhausted dead letter's headers %v, want %v", h, want)
			}
			want = amqp091.Table{"traceparent": tc.traceparent, "tracestate": "vendor=1", "tenant": "acme",
				idemamqp.HeaderAttempts: int32(1), idemamqp.HeaderOutcome: "ERROR", idemamqp.HeaderKind: "UNDECODABLE",
				idemamqp.HeaderKey: garbled, idemamqp.HeaderOriginalQueue: topo.Queue,
				idemamqp.HeaderOriginalExch: "", idemamqp.HeaderOriginalRouting: topo.Queue}
			h := dead[garbled].Headers
			reason, _ := h[idemamqp.HeaderReason].(string)
			delete(h, idemamqp.HeaderReason)
			if !reflect.DeepEqual(h, want) || !strings.HasPrefix(reason, "amqp: undecodable") {
				t.Errorf("undecodable dead letter's headers %v with reason %q, want %v with the decoding error", h, reason, want)
			}
			if string(dead[garbled].Body) != `{not json` || len(runs.of(garbled)) != 0 {
				t.Errorf("undecodable dead letter's body %q after %d runs, want the message's body after none",
					dead[garbled].Body, len(runs.of(garbled)))
			}
		})
	}
}
