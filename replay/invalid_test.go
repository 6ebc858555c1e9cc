package replay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/replay"
)

// Lines that are not messages are counted INVALID and named, by line number and
// why, in the plan and in the execution's report; nothing runs for them, and the
// other lines run once.
func TestInvalidLinesAreNamed(t *testing.T) {
	ctx := context.Background()
	store := redisStore(t)
	path := writeJSONL(t,
		`{"key":"a","payload":"x"}`,
		`{"payload":"no key"}`,
		``,
		`not json`,
		`{"key":"b","payload_base64":"!!"}`,
		`{"key":"`+strings.Repeat("k", 600)+`","payload":"too long a key"}`,
		`{"key":"c","payload":"y"}`,
	)
	want := []struct {
		line int64
		why  string
	}{{2, `no "key"`}, {4, "not a JSON object"}, {5, "payload_base64"}, {6, "invalid key"}}
	check := func(what string, got []replay.ItemError) {
		t.Helper()
		var invalid []replay.ItemError
		for _, e := range got {
			if e.Verdict == replay.Invalid {
				invalid = append(invalid, e)
			}
		}
		if len(invalid) != len(want) {
			t.Fatalf("%s names %d invalid lines, want %d: %+v", what, len(invalid), len(want), got)
		}
		for i, w := range want {
			e := invalid[i]
			if e.Partition != "" || e.Offset != w.line || !strings.Contains(e.Err, w.why) || strings.Contains(e.Err, "line ") {
				t.Fatalf("%s: invalid line %d named as %+v, want line %d: ...%s...", what, i, e, w.line, w.why)
			}
		}
	}

	plan, err := replay.Plan(ctx, store, openJSONL(t, path))
	if err != nil {
		t.Fatal(err)
	}
	if plan.Messages != 6 || plan.Counts[replay.Invalid] != 4 || plan.Counts[replay.Unseen] != 2 {
		t.Fatalf("plan: %d messages, %v", plan.Messages, plan.Counts)
	}
	check("the plan", plan.Invalid)
	if ex := plan.Examples[replay.Invalid]; len(ex) != 1 || ex[0] != "b" {
		t.Fatalf("the plan's example keys of INVALID lines: %q", ex)
	}

	var ran []string
	rep, err := replay.Execute(ctx, store, openJSONL(t, path), func(_ context.Context, m replay.Message) (int, error) {
		ran = append(ran, string(m.Key))
		return 1, nil
	}, replay.WithConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ran) != "[a c]" || rep.Counts[replay.Ran] != 2 || rep.Counts[replay.Invalid] != 4 {
		t.Fatalf("execution: ran %v, %v", ran, rep.Counts)
	}
	check("the report", rep.Errors)
}
