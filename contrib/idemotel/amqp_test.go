package idemotel_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idemamqp "github.com/idemkit/idemkit/adapters/amqp"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/contrib/idemotel"
	"github.com/idemkit/idemkit/internal/testenv"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// amqpCounts counts a worker's retry copies, dead-letter copies and acked
// deliveries.
type amqpCounts struct{ retries, dead, acked atomic.Int64 }

func (c *amqpCounts) OnRetry(consumer.RetryEvent)           { c.retries.Add(1) }
func (c *amqpCounts) OnDeadLetter(consumer.DeadLetterEvent) { c.dead.Add(1) }
func (c *amqpCounts) OnAck(e consumer.AckEvent)             { c.acked.Add(int64(e.Messages)) }

// amqpTopology declares queues of t's own on the broker at url, deleted when t ends.
func amqpTopology(t *testing.T, url string) idemamqp.Topology {
	t.Helper()
	q := fmt.Sprintf("idemkit-test-%s-%04x", t.Name(), rand.N(1<<16))
	topo := idemamqp.Topology{Queue: q, DeadLetterQueue: q + ".dlq", RetryDelays: []time.Duration{100 * time.Millisecond}}
	conn, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := topo.Declare(conn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c, err := amqp091.Dial(url); err == nil {
			_ = topo.Delete(c)
			_ = c.Close()
		}
	})
	return topo
}

// amqpSend publishes msgs to queue at url, confirmed.
func amqpSend(t *testing.T, url, queue string, msgs ...amqp091.Publishing) {
	t.Helper()
	ch := testenv.AMQPChannel(t, url)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		c, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, false, false, m)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := c.WaitContext(context.Background()); !ok || err != nil {
			t.Fatalf("publish not confirmed: %v", err)
		}
	}
}

// amqpDrain takes every message from queue at url, by MessageId.
func amqpDrain(t *testing.T, url, queue string) map[string]amqp091.Delivery {
	t.Helper()
	ch := testenv.AMQPChannel(t, url)
	out := map[string]amqp091.Delivery{}
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return out
		}
		out[d.MessageId] = d
	}
}

// traceparent is the W3C traceparent header of sc.
func traceparent(sc trace.SpanContext) string {
	h := propagation.MapCarrier{}
	w3c.Inject(trace.ContextWithSpanContext(context.Background(), sc), h)
	return h.Get("traceparent")
}

// The RabbitMQ worker's retry and dead-letter copies carry the trace context of
// the execution that made them: a retry copy its attempt's span, so the next
// attempt's span links to it and the trace goes on through every retry; an
// exhausted dead letter the last attempt's span; an undecodable delivery's dead
// letter, made without a handler run, the delivered message's own trace context.
// A traceparent header that is no W3C traceparent (malformed text, a number)
// costs nothing: the copies are made, the handler's copies carry its span, and
// the undecodable one keeps the header as it came.
func TestAMQPCopiesCarryTheExecutionsSpan(t *testing.T) {
	url := testenv.AMQP(t)
	tr, exp, _ := newTracer(t)
	counts := &amqpCounts{}
	store := memStore(t, consumer.WithScope("fulfilment"), consumer.WithMaxAttempts(2), consumer.WithObserver(tr, counts))
	topo := amqpTopology(t, url)
	var mu sync.Mutex
	runs := map[string][]amqp091.Table{}
	handlerSpans := map[string][]trace.SpanContext{}
	decode := func(d amqp091.Delivery) (string, error) {
		if string(d.Body) != "order" {
			return "", errors.New("not an order")
		}
		return d.MessageId, nil
	}
	w, err := idemamqp.NewTypedWorker(store, url, topo, decode,
		func(ctx context.Context, id string, d amqp091.Delivery) (int, error) {
			mu.Lock()
			runs[id] = append(runs[id], d.Headers)
			handlerSpans[id] = append(handlerSpans[id], trace.SpanContextFromContext(ctx))
			mu.Unlock()
			if id == "huge" {
				return 0, consumer.Permanent(errors.New("no such warehouse"))
			}
			return 0, errors.New("warehouse API timed out")
		})
	if err != nil {
		t.Fatal(err)
	}
	prod, ph := producer(7)
	cases := []struct {
		name        string
		traceparent any
		link        trace.SpanContext // the first attempt's link: the producer's span, if its header is one
	}{
		{"w3c", ph.Get("traceparent"), prod},
		{"malformed", "not-a-traceparent", trace.SpanContext{}},
		{"number", int32(7), trace.SpanContext{}},
	}
	for _, tc := range cases {
		h := amqp091.Table{"traceparent": tc.traceparent, "baggage": "tenant=acme", "tenant": "acme"}
		amqpSend(t, url, topo.Queue,
			amqp091.Publishing{MessageId: "poison-" + tc.name, Headers: h, Body: []byte("order")},
			amqp091.Publishing{MessageId: "garbled-" + tc.name, Headers: h, Body: []byte("{not an order")})
	}
	// Headers past 64 KiB: its dead letter goes body-less, with the idemkit
	// headers and the trace context only.
	amqpSend(t, url, topo.Queue, amqp091.Publishing{MessageId: "huge", Body: []byte("order"),
		Headers: amqp091.Table{"traceparent": ph.Get("traceparent"), "big": strings.Repeat("x", 70<<10)}})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	n := int64(len(cases))
	testenv.Eventually(t, 30*time.Second, "every message dead-lettered and acked", func() bool {
		return counts.dead.Load() == 2*n+1 && counts.acked.Load() == 3*n+1
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if counts.retries.Load() != n || counts.dead.Load() != 2*n+1 || counts.acked.Load() != 3*n+1 {
		t.Fatalf("%d retry copies, %d dead letters, %d acked; want %d, %d and %d",
			counts.retries.Load(), counts.dead.Load(), counts.acked.Load(), n, 2*n+1, 3*n+1)
	}

	spans := map[string][]tracetest.SpanStub{} // by key, in attempt order
	for _, s := range exp.GetSpans() {
		key := attrs(s)[idemotel.KeyKey]
		spans[key] = append(spans[key], s)
	}
	if len(exp.GetSpans()) != 2*len(cases)+1 {
		t.Fatalf("%d spans, want %d: two attempts of each failing message, one of the huge one, none for an undecodable one",
			len(exp.GetSpans()), 2*len(cases)+1)
	}
	dead := amqpDrain(t, url, topo.DeadLetterQueue)
	if len(dead) != 2*len(cases)+1 {
		t.Fatalf("%d dead letters in the queue, want %d", len(dead), 2*len(cases)+1)
	}
	if hs := spans["huge"]; len(hs) != 1 || len(runs["huge"]) != 1 {
		t.Fatalf("the huge message ran %d times with %d spans, want 1 with 1", len(runs["huge"]), len(hs))
	}
	bodyLess := amqp091.Table{"traceparent": traceparent(spans["huge"][0].SpanContext), idemamqp.HeaderBodyLess: "true",
		idemamqp.HeaderAttempts: int32(1), idemamqp.HeaderOutcome: "ERROR", idemamqp.HeaderKind: "PERMANENT",
		idemamqp.HeaderKey: "huge", idemamqp.HeaderOriginalQueue: topo.Queue,
		idemamqp.HeaderReason:       "no such warehouse",
		idemamqp.HeaderOriginalExch: "", idemamqp.HeaderOriginalRouting: topo.Queue}
	if got := dead["huge"]; !reflect.DeepEqual(got.Headers, bodyLess) || len(got.Body) != 0 {
		t.Errorf("body-less dead letter's headers %v and %d bytes of body, want %v and none", got.Headers, len(got.Body), bodyLess)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			poison, garbled := "poison-"+tc.name, "garbled-"+tc.name
			mu.Lock()
			seen, hs := runs[poison], handlerSpans[poison]
			mu.Unlock()
			ss := spans[poison]
			if len(seen) != 2 || len(ss) != 2 || len(runs[garbled]) != 0 {
				t.Fatalf("%s ran %d times with %d spans, %s %d times; want 2 with 2, and 0",
					poison, len(seen), len(ss), garbled, len(runs[garbled]))
			}
			if attrs(ss[0])[idemotel.AttemptKey] != "1" {
				ss[0], ss[1] = ss[1], ss[0]
			}
			first, second := ss[0].SpanContext, ss[1].SpanContext
			if !hs[0].Equal(first) || !hs[1].Equal(second) || attrs(ss[1])[idemotel.AttemptKey] != "2" {
				t.Fatalf("handlers ran under %v and %v, want the recorded attempts 1 and 2: %v and %v", hs[0], hs[1], first, second)
			}
			// The first attempt links to the producer (when its header is a
			// traceparent); the second, run from the retry copy, to the first.
			if got := linked(ss[0]); !got.Equal(tc.link) {
				t.Errorf("first attempt linked to %v, want %v", got, tc.link)
			}
			if got := linked(ss[1]); got.TraceID() != first.TraceID() || got.SpanID() != first.SpanID() {
				t.Errorf("second attempt linked to %v, want the first attempt's span %v", got, first)
			}
			retried := amqp091.Table{"traceparent": traceparent(first), "baggage": "tenant=acme", "tenant": "acme",
				idemamqp.HeaderAttempts: int32(1), idemamqp.HeaderOriginalExch: "", idemamqp.HeaderOriginalRouting: topo.Queue}
			if got := withoutDeaths(seen[1]); !reflect.DeepEqual(got, retried) {
				t.Errorf("retry copy's headers %v, want %v", got, retried)
			}
			exhausted := amqp091.Table{"traceparent": traceparent(second), "baggage": "tenant=acme", "tenant": "acme",
				idemamqp.HeaderAttempts: int32(2), idemamqp.HeaderOutcome: "ERROR", idemamqp.HeaderKind: "EXHAUSTED",
				idemamqp.HeaderKey: poison, idemamqp.HeaderOriginalQueue: topo.Queue,
				idemamqp.HeaderReason:       "consumer: attempts exhausted after 2 attempts: warehouse API timed out",
				idemamqp.HeaderOriginalExch: "", idemamqp.HeaderOriginalRouting: topo.Queue}
			if got := withoutDeaths(dead[poison].Headers); !reflect.DeepEqual(got, exhausted) {
				t.Errorf("exhausted dead letter's headers %v, want %v", got, exhausted)
			}
			h := dead[garbled].Headers
			if h["traceparent"] != tc.traceparent || h["baggage"] != "tenant=acme" || h[idemamqp.HeaderKind] != "UNDECODABLE" ||
				h[idemamqp.HeaderAttempts] != int32(1) || !strings.Contains(fmt.Sprint(h[idemamqp.HeaderReason]), "not an order") {
				t.Errorf("undecodable dead letter's headers %v, want its own traceparent %v, its baggage and the reason", h, tc.traceparent)
			}
		})
	}
}

// linked is the span context s links to (invalid when none); more than one link
// is none of them.
func linked(s tracetest.SpanStub) trace.SpanContext {
	if len(s.Links) != 1 {
		return trace.SpanContext{}
	}
	return s.Links[0].SpanContext
}

// withoutDeaths is h without the headers the broker adds when a message
// dead-letters out of a retry queue.
func withoutDeaths(h amqp091.Table) amqp091.Table {
	out := amqp091.Table{}
	for k, v := range h {
		if k != "x-death" && !strings.HasPrefix(k, "x-first-death-") && !strings.HasPrefix(k, "x-last-death-") {
			out[k] = v
		}
	}
	return out
}

// An ordered RabbitMQ worker retries in place, without a copy: the dead letter
// of a delivery that ran twice carries the span of its last run.
func TestAMQPOrderedDeadLetterCarriesTheLastRun(t *testing.T) {
	url := testenv.AMQP(t)
	tr, exp, _ := newTracer(t)
	counts := &amqpCounts{}
	store := memStore(t, consumer.WithScope("fulfilment"), consumer.WithMaxAttempts(2), consumer.WithObserver(tr, counts))
	topo := amqpTopology(t, url)
	var runs atomic.Int64
	w, err := idemamqp.NewWorker(store, url, topo, func(ctx context.Context, d amqp091.Delivery) (int, error) {
		runs.Add(1)
		return 0, errors.New("warehouse API timed out")
	}, idemamqp.WithOrdering(idemamqp.ByKeyHeader("account")))
	if err != nil {
		t.Fatal(err)
	}
	prod, ph := producer(8)
	amqpSend(t, url, topo.Queue, amqp091.Publishing{MessageId: "poison", Body: []byte("order"),
		Headers: amqp091.Table{"traceparent": ph.Get("traceparent"), "account": "acme"}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	testenv.Eventually(t, 30*time.Second, "the delivery dead-lettered and acked", func() bool {
		return counts.dead.Load() == 1 && counts.acked.Load() == 1
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if runs.Load() != 2 || len(spans) != 2 || counts.retries.Load() != 1 || counts.dead.Load() != 1 || counts.acked.Load() != 1 {
		t.Fatalf("%d runs, %d spans, %d retries in place, %d dead letters, %d acked; want 2, 2, 1, 1 and 1",
			runs.Load(), len(spans), counts.retries.Load(), counts.dead.Load(), counts.acked.Load())
	}
	last := spans[1]
	if attrs(last)[idemotel.AttemptKey] != "2" {
		last = spans[0]
	}
	for _, s := range spans {
		if got := linked(s); !got.Equal(prod) {
			t.Errorf("attempt %s linked to %v, want the producer's span %v", attrs(s)[idemotel.AttemptKey], got, prod)
		}
	}
	dead := amqpDrain(t, url, topo.DeadLetterQueue)
	h := dead["poison"].Headers
	if len(dead) != 1 || h["traceparent"] != traceparent(last.SpanContext) || h[idemamqp.HeaderKind] != "EXHAUSTED" ||
		h[idemamqp.HeaderAttempts] != int32(2) || h["account"] != "acme" {
		t.Fatalf("%d dead letters, headers %v; want one with the last run's traceparent %s, EXHAUSTED after 2 attempts",
			len(dead), h, traceparent(last.SpanContext))
	}
}
