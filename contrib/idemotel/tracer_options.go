package idemotel

import (
	"errors"
	"fmt"

	"github.com/idemkit/idemkit/consumer"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TracerOption configures a Tracer.
type TracerOption interface{ applyTracer(*tracerCfg) }

type tracerOptFunc func(*tracerCfg)

func (f tracerOptFunc) applyTracer(c *tracerCfg) { f(c) }

type tracerCfg struct {
	provider    trace.TracerProvider
	propagator  propagation.TextMapPropagator
	system      string
	destination string
	fromCarrier func(consumer.Carrier) []attribute.KeyValue
	asParent    bool
	keyAttr     bool
	outcomes    bool
	maxPending  int
}

func tracerDefaults() tracerCfg {
	return tracerCfg{
		provider:   otel.GetTracerProvider(),
		propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		keyAttr:    true,
		outcomes:   true,
		maxPending: 10000,
	}
}

// WithTracerProvider sets where spans go. Default: the global provider
// (otel.GetTracerProvider) at the time NewTracer is called.
func WithTracerProvider(p trace.TracerProvider) TracerOption {
	return tracerOptFunc(func(c *tracerCfg) { c.provider = p })
}

// WithPropagator sets how trace context is read from a message's headers and
// written into produced copies. Default: W3C trace context and W3C baggage
// (propagation.TraceContext and propagation.Baggage), whatever the global
// propagator is.
func WithPropagator(p propagation.TextMapPropagator) TracerOption {
	return tracerOptFunc(func(c *tracerCfg) { c.propagator = p })
}

// WithSystem sets the messaging.system attribute of every span ("kafka",
// "rabbitmq", ...). Default: none.
func WithSystem(system string) TracerOption {
	return tracerOptFunc(func(c *tracerCfg) { c.system = system })
}

// WithDestination sets the messaging.destination.name attribute of every span
// (the topic or queue consumed) and names the spans "process <destination>".
// Default: none, and spans are named "process".
func WithDestination(name string) TracerOption {
	return tracerOptFunc(func(c *tracerCfg) { c.destination = name })
}

// WithCarrierAttributes adds the attributes fn returns from the delivered
// message's headers to the span of every execution whose context holds them (a
// destination or partition header the producer sets, say). fn runs on the
// handler's path: keep it fast. Default: none.
func WithCarrierAttributes(fn func(consumer.Carrier) []attribute.KeyValue) TracerOption {
	return tracerOptFunc(func(c *tracerCfg) { c.fromCarrier = fn })
}

// WithProducerAsParent makes the producer's span context, read from the message's
// headers, the parent of the execution's span (true) instead of a link (false).
// A link keeps the consumer's work in a trace of its own; a parent puts it in the
// producer's trace. Default false: a link.
func WithProducerAsParent(on bool) TracerOption {
	return tracerOptFunc(func(c *tracerCfg) { c.asParent = on })
}

// WithKeyAttribute records the idempotency key as the idemkit.key attribute
// (true) or leaves it out (false), for keys that must not leave the service.
// Default true.
func WithKeyAttribute(on bool) TracerOption {
	return tracerOptFunc(func(c *tracerCfg) { c.keyAttr = on })
}

// WithOutcomeSpans gives executions that run no handler (duplicates, keys in
// progress, conflicts, store errors before the claim) a span of their own (true),
// or none (false). Default true: one span per execution.
func WithOutcomeSpans(on bool) TracerOption {
	return tracerOptFunc(func(c *tracerCfg) { c.outcomes = on })
}

// WithMaxPending bounds how many ended handler spans wait for their execution's
// outcome at once; past it a span is ended without the outcome attributes. The
// wait lasts from the handler's return to the settlement (for ExecuteBatch, until
// the batch's last handler returns and the batch is settled). Default 10000.
func WithMaxPending(n int) TracerOption {
	return tracerOptFunc(func(c *tracerCfg) { c.maxPending = n })
}

// errConfig is what every configuration error wraps.
var errConfig = errors.New("idemotel: invalid configuration")

func bad(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errConfig, fmt.Sprintf(format, args...))
}

func (c *tracerCfg) validate() error {
	switch {
	case c.provider == nil:
		return bad("WithTracerProvider(nil): pass a provider, or leave the option out for the global one")
	case c.propagator == nil:
		return bad("WithPropagator(nil): pass a propagator, or leave the option out for W3C trace context and baggage")
	case c.maxPending < 1:
		return bad("WithMaxPending(%d): give at least 1", c.maxPending)
	}
	return nil
}
