package testenv

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/idemkit/idemkit/consumer"
)

type stampKey struct{}

// StampTracer is a consumer.TraceHook for tests of what trace context a broker
// adapter's copies carry: it stamps each handler run's context with
// "run-<n>-<key>" (n counts the key's runs from 1) and writes that stamp as a
// copy's traceparent; given a context without a run, it writes "own:" and the
// delivered message's traceparent. With Panics set, its Inject panics after
// writing.
type StampTracer struct {
	Panics bool
	mu     sync.Mutex
	runs   map[consumer.Key][]string // each key's stamps, in order of run
}

func (s *StampTracer) StartHandler(ctx context.Context, e consumer.HandlerEvent) (context.Context, func(consumer.HandlerEvent)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runs == nil {
		s.runs = map[consumer.Key][]string{}
	}
	stamp := fmt.Sprintf("run-%d-%s", len(s.runs[e.Key])+1, e.Key)
	s.runs[e.Key] = append(s.runs[e.Key], stamp)
	return context.WithValue(ctx, stampKey{}, stamp), nil
}

func (s *StampTracer) Inject(ctx context.Context, set func(key, value string)) {
	if stamp, ok := ctx.Value(stampKey{}).(string); ok {
		set("traceparent", stamp)
	} else if c, ok := consumer.CarrierFromContext(ctx); ok {
		set("traceparent", "own:"+c.Get("traceparent"))
	}
	if s.Panics {
		panic("tracer bug")
	}
}

// Stamps returns key's stamps, one per handler run, in order.
func (s *StampTracer) Stamps(key consumer.Key) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.runs[key]...)
}

// PanicLog is a slog.Handler that counts the records logged at Error whose
// stack attribute shows a StampTracer's Inject: the panics an adapter recovered
// from its tracer.
type PanicLog struct {
	mu     sync.Mutex
	logged int
}

func (l *PanicLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *PanicLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *PanicLog) WithGroup(string) slog.Handler            { return l }
func (l *PanicLog) Handle(_ context.Context, r slog.Record) error {
	stack := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "stack" {
			stack = a.Value.String()
		}
		return true
	})
	if r.Level >= slog.LevelError && strings.Contains(stack, "StampTracer).Inject") {
		l.mu.Lock()
		l.logged++
		l.mu.Unlock()
	}
	return nil
}

// Count is how many such records were logged.
func (l *PanicLog) Count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.logged
}
