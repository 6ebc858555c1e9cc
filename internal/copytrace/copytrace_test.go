package copytrace_test

import (
	"context"
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
			copytrace.Inject(ctx, tc.obs, func(k, v string) { got[k] = v; sets++ })
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
