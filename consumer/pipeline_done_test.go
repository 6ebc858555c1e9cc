package consumer_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
)

// logRecords is a slog.Handler that keeps the attributes of every record logged.
type logRecords struct {
	mu   sync.Mutex
	recs []map[string]string
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecords) WithGroup(string) slog.Handler            { return l }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	m := map[string]string{"msg": r.Message, "level": r.Level.String()}
	r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
	l.mu.Lock()
	l.recs = append(l.recs, m)
	l.mu.Unlock()
	return nil
}

// where returns the records whose attribute while is while and whose key starts with prefix.
func (l *logRecords) where(while, prefix string) []map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]string
	for _, m := range l.recs {
		if m["while"] == while && strings.HasPrefix(m["key"], prefix) {
			out = append(out, m)
		}
	}
	return out
}

// A Done that panics crashes nothing: the panic is logged at Error with the
// result Done was given, the message's slot and key are freed as if Done had
// returned, and the pipeline goes on (a later message of the same key finds it
// done). The same holds for a message answered in Submit (an invalid key).
func TestPipelineContainsAPanicInDone(t *testing.T) {
	logs := &logRecords{}
	obs := &tally{}
	for name, s := range pipelineStores(t, consumer.WithLogger(slog.New(logs)), consumer.WithObserver(obs)) {
		t.Run(name, func(t *testing.T) {
			const n = 6
			ctx := context.Background()
			p, err := consumer.NewPipeline[int](ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			prefix := t.Name() + "-"
			var runs, dones atomic.Int32
			var mu sync.Mutex
			got := map[consumer.Key]consumer.Result[int]{}
			for i := 0; i < n; i++ {
				key := consumer.Key(fmt.Sprint(prefix, i))
				err := p.Submit(ctx, consumer.PipelineItem[int]{Key: key, Payload: []byte(key),
					Run: func(context.Context) (int, error) { runs.Add(1); return i + 1, nil },
					Done: func(r consumer.Result[int]) {
						dones.Add(1)
						if i%2 == 0 {
							panic(fmt.Sprint("Done of message ", i, " is broken"))
						}
						mu.Lock()
						got[r.Key] = r
						mu.Unlock()
					}})
				if err != nil {
					t.Fatal(err)
				}
			}
			invalid := consumer.Key(prefix + strings.Repeat("x", 1000)) // over the key length limit
			if err := p.Submit(ctx, consumer.PipelineItem[int]{Key: invalid, Run: func(context.Context) (int, error) {
				runs.Add(1)
				return 0, nil
			}, Done: func(consumer.Result[int]) { dones.Add(1); panic("Done of the invalid key is broken") }}); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 10*time.Second, "every Done called", func() bool { return dones.Load() == n+1 })
			// The pipeline goes on: the key of a message whose Done panicked is free and done.
			again := make(chan consumer.Result[int], 1)
			if err := p.Submit(ctx, consumer.PipelineItem[int]{Key: consumer.Key(prefix + "0"), Payload: []byte(prefix + "0"),
				Run:  func(context.Context) (int, error) { runs.Add(1); return 0, nil },
				Done: func(r consumer.Result[int]) { again <- r }}); err != nil {
				t.Fatal(err)
			}
			if r := <-again; r.Outcome != consumer.Duplicate || r.Value != 1 {
				t.Fatalf("the key of a message whose Done panicked, again: %v %v %v; want DUPLICATE 1", r.Outcome, r.Value, r.Err)
			}
			if err := p.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			if runs.Load() != n || dones.Load() != n+1 {
				t.Fatalf("%d handlers ran and %d Done calls; want %d and %d", runs.Load(), dones.Load(), n, n+1)
			}
			for i := 1; i < n; i += 2 {
				if r := got[consumer.Key(fmt.Sprint(prefix, i))]; r.Outcome != consumer.Success || r.Value != i+1 {
					t.Fatalf("message %d: %v %v %v; want SUCCESS %d", i, r.Outcome, r.Value, r.Err, i+1)
				}
			}
			logged := logs.where("calling a message's Done", prefix)
			if len(logged) != n/2+1 {
				t.Fatalf("%d panics in Done logged, want %d: %v", len(logged), n/2+1, logged)
			}
			outcomes := map[string]int{}
			for _, m := range logged {
				if m["level"] != "ERROR" || !strings.Contains(m["panic"], "is broken") || m["stack"] == "" {
					t.Fatalf("logged: %v", m)
				}
				outcomes[m["outcome"]+"/"+m["action"]]++
			}
			if outcomes["SUCCESS/ack"] != n/2 || outcomes["ERROR/dead-letter"] != 1 {
				t.Fatalf("logged results %v; want %d SUCCESS/ack and 1 ERROR/dead-letter (the invalid key)", outcomes, n/2)
			}
			// Every settled message is settled in the store, its Done's panic notwithstanding.
			for i := 0; i < n; i++ {
				key := consumer.Key(fmt.Sprint(prefix, i))
				r := consumer.ExecuteIdempotently(ctx, s, key, []byte(key), func(context.Context) (int, error) { runs.Add(1); return 0, nil })
				if r.Outcome != consumer.Duplicate || r.Value != i+1 {
					t.Fatalf("message %d next delivery: %v %v %v; want DUPLICATE %d", i, r.Outcome, r.Value, r.Err, i+1)
				}
			}
			if runs.Load() != n {
				t.Fatalf("%d handlers ran in all, want %d", runs.Load(), n)
			}
		})
	}
}

// panickyOutcomes is an observer whose outcome hook panics.
type panickyOutcomes struct{}

func (panickyOutcomes) OnOutcome(consumer.OutcomeEvent) { panic("the outcome hook is broken") }

// An outcome hook that panics keeps no Done from being called: each message is
// answered once with its result, and the panic is logged.
func TestPipelineContainsAPanicInAnOutcomeHook(t *testing.T) {
	logs := &logRecords{}
	for name, s := range pipelineStores(t, consumer.WithLogger(slog.New(logs)), consumer.WithObserver(panickyOutcomes{})) {
		t.Run(name, func(t *testing.T) {
			const n = 4
			ctx := context.Background()
			p, err := consumer.NewPipeline[int](ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			res := newResults[int]()
			for i := 0; i < n; i++ {
				if err := p.Submit(ctx, res.item(consumer.Key(fmt.Sprint(t.Name(), "-", i)), func(context.Context) (int, error) {
					return 1, nil
				})); err != nil {
					t.Fatal(err)
				}
			}
			res.finish(ctx, t, p)
			wantAllSucceeded(t, res, n)
			if logged := logs.where("reporting an outcome", t.Name()+"-"); len(logged) != n {
				t.Fatalf("%d outcome hook panics logged, want %d", len(logged), n)
			}
		})
	}
}
