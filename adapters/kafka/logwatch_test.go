package kafka_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
)

// logWatch is a slog handler that keeps what a consumer logged, so that a test
// can wait for a line or check what an operator would read.
type logWatch struct {
	mu    sync.Mutex
	lines []logLine
	waits []logWait
}

type logLine struct {
	level slog.Level
	text  string // the message, then every attribute as key=value
}

type logWait struct {
	prefix string
	ch     chan struct{}
}

func (w *logWatch) logger() *slog.Logger { return slog.New(w) }

func (w *logWatch) Enabled(context.Context, slog.Level) bool { return true }

func (w *logWatch) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.Key + "=" + a.Value.String())
		return true
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lines = append(w.lines, logLine{r.Level, b.String()})
	kept := w.waits[:0]
	for _, wt := range w.waits {
		if strings.HasPrefix(r.Message, wt.prefix) {
			close(wt.ch)
		} else {
			kept = append(kept, wt)
		}
	}
	w.waits = kept
	return nil
}

func (w *logWatch) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *logWatch) WithGroup(string) slog.Handler      { return w }

// next returns a channel closed when a message starting with prefix is logged
// from now on.
func (w *logWatch) next(prefix string) <-chan struct{} {
	ch := make(chan struct{})
	w.mu.Lock()
	w.waits = append(w.waits, logWait{prefix, ch})
	w.mu.Unlock()
	return ch
}

// find returns the lines at level whose message starts with prefix.
func (w *logWatch) find(level slog.Level, prefix string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, l := range w.lines {
		if l.level == level && strings.HasPrefix(l.text, prefix) {
			out = append(out, l.text)
		}
	}
	return out
}
