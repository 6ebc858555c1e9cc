package copytrace_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/copytrace"
)

type ctxKey struct{}

// tracer writes the value ctx holds under ctxKey as the header "trace", and its
// name as "by-<name>".
type tracer struct{ name string }

func (tracer) StartHandler(ctx context.Context, _ consumer.HandlerEvent) (context.Context, func(consumer.HandlerEvent)) {
	return ctx, nil
}

func (t tracer) Inject(ctx context.Context, set func(key, value string)) {
	s, _ := ctx.Value(ctxKey{}).(string)
	set("trace", s)
	set("by-"+t.name, "yes")
}

// outcomes is an observer that is no tracer.
type outcomes struct{}

func (outcomes) OnOutcome(consumer.OutcomeEvent) {}

// Every tracer among the observers writes, in their order, with the given
// context; other observers are passed over; no tracer writes nothing.
func TestInject(t *testing.T) {
	ctx := context.WithValue(context.Background(), ctxKey{}, "span-1")
	for _, tc := range []struct {
		name string
		obs  []consumer.Observer
		want map[string]string
		sets int
	}{
		{"none", nil, map[string]string{}, 0},
		{"no tracer", []consumer.Observer{outcomes{}}, map[string]string{}, 0},
		{"one", []consumer.Observer{outcomes{}, tracer{"a"}}, map[string]string{"trace": "span-1", "by-a": "yes"}, 2},
		{"two", []consumer.Observer{tracer{"a"}, outcomes{}, tracer{"b"}},
			map[string]string{"trace": "span-1", "by-a": "yes", "by-b": "yes"}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, sets := map[string]string{}, 0
			copytrace.Inject(ctx, nil, tc.obs, func(k, v string) { got[k] = v; sets++ })
			if sets != tc.sets || len(got) != len(tc.want) {
				t.Fatalf("%d sets giving %v, want %d giving %v", sets, got, tc.sets, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Fatalf("%s = %q, want %q (all: %v)", k, got[k], v, got)
				}
			}
		})
	}
}

// broken writes a header, then panics, as a tracer with a bug might.
type broken struct{}

func (broken) StartHandler(ctx context.Context, _ consumer.HandlerEvent) (context.Context, func(consumer.HandlerEvent)) {
	return ctx, nil
}

func (broken) Inject(_ context.Context, set func(key, value string)) {
	set("trace", "half-written")
	panic("tracer bug")
}

// A tracer that panics is recovered and logged once at Error with its stack; it
// writes nothing, not even what it set before panicking, and the tracers around
// it write as usual. Without a logger it is recovered all the same.
func TestInjectRecoversAPanickingTracer(t *testing.T) {
	ctx := context.WithValue(context.Background(), ctxKey{}, "span-1")
	for _, tc := range []struct {
		name string
		obs  []consumer.Observer
		want map[string]string
		sets int
	}{
		{"alone", []consumer.Observer{broken{}}, map[string]string{}, 0},
		{"after one", []consumer.Observer{tracer{"a"}, broken{}}, map[string]string{"trace": "span-1", "by-a": "yes"}, 2},
		{"before one", []consumer.Observer{broken{}, outcomes{}, tracer{"b"}}, map[string]string{"trace": "span-1", "by-b": "yes"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&buf, nil))
			got, sets := map[string]string{}, 0
			copytrace.Inject(ctx, log, tc.obs, func(k, v string) { got[k] = v; sets++ })
			if sets != tc.sets || len(got) != len(tc.want) {
				t.Fatalf("%d sets giving %v, want %d giving %v", sets, got, tc.sets, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Fatalf("%s = %q, want %q (all: %v)", k, got[k], v, got)
				}
			}
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			if len(lines) != 1 {
				t.Fatalf("%d log lines, want 1: %q", len(lines), buf.String())
			}
			var rec map[string]any
			if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
				t.Fatal(err)
			}
			stack, _ := rec["stack"].(string)
			if rec["level"] != "ERROR" || rec["panic"] != "tracer bug" || rec["tracer"] != "copytrace_test.broken" ||
				!strings.Contains(stack, "copytrace_test.broken.Inject") {
				t.Fatalf("logged %v; want one Error naming the tracer, its panic and a stack through its Inject", rec)
			}
		})
	}
	got := map[string]string{}
	copytrace.Inject(ctx, nil, []consumer.Observer{broken{}, tracer{"a"}}, func(k, v string) { got[k] = v })
	if len(got) != 2 || got["trace"] != "span-1" {
		t.Fatalf("without a logger: %v, want the other tracer's two headers", got)
	}
}
