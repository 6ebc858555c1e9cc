package idemkittest_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/idemkittest"
)

// fakeTB records what the kit tells a test, as River's rivertest tests its
// helpers: Errorf and Logf are kept, Fatalf is kept and ends the goroutine (run
// the kit through fakeTB.run).
type fakeTB struct {
	testing.TB // nil: a method the kit should not call panics

	mu     sync.Mutex
	errors []string
	logs   []string
	fatal  string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

func (f *fakeTB) Logf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logs = append(f.logs, fmt.Sprintf(format, args...))
}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// run calls fn on a goroutine of its own, as the testing package runs a test,
// so that Fatalf can end it.
func (f *fakeTB) run(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
}

// counter is a side effect: a count of charges.
type counter struct{ n atomic.Int32 }

func (c *counter) count() int { return int(c.n.Load()) }

var msg = idemkittest.Message{Key: consumer.Key("charge:order-42"), Payload: []byte(`{"order":"42","cents":1999}`)}

// plain charges before idemkit records the completion, and ignores its
// context: the deliberately non-idempotent handler.
func (c *counter) plain(context.Context) (string, error) {
	c.n.Add(1)
	return "ch_42", nil
}

// careful is plain, but returns as soon as its context is cancelled.
func (c *counter) careful(ctx context.Context) (string, error) {
	if ctx.Err() != nil {
		return "", context.Cause(ctx)
	}
	c.n.Add(1)
	return "ch_42", nil
}

// fenced keeps one row per key, written only with a newer fence than the last
// (package fence's statement, in memory): running it again changes nothing.
type fenced struct {
	mu   sync.Mutex
	rows map[consumer.Key]int64
}

func newFenced() *fenced { return &fenced{rows: map[consumer.Key]int64{}} }

func (f *fenced) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.rows)
}

func (f *fenced) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.rows)
}

func (f *fenced) handle(ctx context.Context) (string, error) {
	fence, _ := consumer.FenceFromContext(ctx)
	in, _ := consumer.InfoFromContext(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	if fence <= f.rows[in.Key] {
		return "", consumer.Permanent(fmt.Errorf("stale writer: fence %d, the row has %d", fence, f.rows[in.Key]))
	}
	f.rows[in.Key] = fence
	return "ch_42", nil
}

// failedScenarios names the scenarios a report failed, in order.
func failedScenarios(r idemkittest.Report) []idemkittest.Scenario {
	var out []idemkittest.Scenario
	for _, v := range r.Verdicts {
		if v.Failure != "" {
			out = append(out, v.Scenario)
		}
	}
	return out
}

func containsAll(t *testing.T, what, s string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(s, p) {
			t.Errorf("%s does not say %q:\n%s", what, p, s)
		}
	}
}
