package admin_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/store/memory"
)

// regrowingStore answers its first scan step as Redis may when its table grows
// between two runs of the same step: the second run of step "" returns a subset
// of the first (the keys of the bucket the larger table splits off come in a
// later step), in another order.
type regrowingStore struct {
	*memory.Store
	mu   sync.Mutex
	runs int
}

func rec(k string) consumer.AdminRecord {
	return consumer.AdminRecord{Scope: "s", Record: consumer.Record{Key: consumer.Key(k), State: "completed"}}
}

func (s *regrowingStore) ScanRecords(_ context.Context, q consumer.ScanQuery) (consumer.ScanPage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []string
	switch q.Cursor {
	case "":
		s.runs++
		keys = []string{"k3", "k7", "k1", "k9", "k5", "k2", "k8", "k4", "k6", "k0"}
		if s.runs > 1 { // regrown: k1, k4, k9 moved to step "b"
			keys = []string{"k0", "k8", "k6", "k2", "k5", "k3", "k7"}
		}
		return page(keys, "a"), nil
	case "a":
		if s.runs > 1 {
			return page([]string{"k1", "k4", "k9", "k10"}, "b"), nil
		}
		return page([]string{"k10"}, "b"), nil
	case "b":
		return page([]string{"k11"}, ""), nil
	}
	return consumer.ScanPage{}, fmt.Errorf("unknown cursor %q", q.Cursor)
}

func page(keys []string, next string) consumer.ScanPage {
	p := consumer.ScanPage{Next: next}
	for _, k := range keys {
		p.Records = append(p.Records, rec(k))
	}
	return p
}

// A page that ends inside a scan step goes on after the last record it returned,
// in key order, so a step that comes back different when run again drops no
// record and repeats none but those the scan itself returns twice.
func TestListPagesThroughAStepThatChanges(t *testing.T) {
	ms, err := memory.NewStore(consumer.WithScope("s"))
	if err != nil {
		t.Fatal(err)
	}
	in, err := admin.New(&regrowingStore{Store: ms})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var got []string
	cur := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("paging does not end")
		}
		p, err := in.List(ctx, admin.Query{Scope: "s", Limit: 4, Cursor: cur})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Records {
			got = append(got, string(r.Key))
		}
		if p.Next == "" {
			break
		}
		cur = p.Next
	}
	seen := map[string]int{}
	for _, k := range got {
		seen[k]++
	}
	for _, k := range []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9", "k10", "k11"} {
		// k1, k4 and k9 the scan itself returns twice (in step "" and, moved, in
		// step "a"): a listing may show those twice, no other
		max := 1
		if k == "k1" || k == "k4" || k == "k9" {
			max = 2
		}
		if seen[k] < 1 || seen[k] > max {
			t.Errorf("%s listed %d times, want 1 to %d (pages: %v)", k, seen[k], max, got)
		}
	}
	if len(seen) != 12 {
		t.Errorf("listed %d distinct records, want 12: %v", len(seen), got)
	}
	if _, err := in.List(ctx, admin.Query{Scope: "s", Cursor: "3/a"}); err == nil {
		t.Error("a cursor no listing returned was accepted")
	}
}

// repeatingStore answers as Redis SCAN may while its table shrinks: a later step
// returns keys an earlier one did, and one step returns a key twice.
type repeatingStore struct{ *memory.Store }

func (s repeatingStore) ScanRecords(_ context.Context, q consumer.ScanQuery) (consumer.ScanPage, error) {
	switch q.Cursor {
	case "":
		return page([]string{"k2", "k0", "k1", "k3"}, "a"), nil
	case "a":
		return page([]string{"k4", "k1", "k5", "k4", "k3"}, "b"), nil
	case "b":
		return page([]string{"k6", "k0"}, ""), nil
	}
	return consumer.ScanPage{}, fmt.Errorf("unknown cursor %q", q.Cursor)
}

// A page never shows a record twice, though its scan steps return one twice.
func TestListPageShowsARecordOnce(t *testing.T) {
	ms, err := memory.NewStore(consumer.WithScope("s"))
	if err != nil {
		t.Fatal(err)
	}
	in, err := admin.New(repeatingStore{ms})
	if err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{100, 6, 5} {
		p, err := in.List(context.Background(), admin.Query{Scope: "s", Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range p.Records {
			got = append(got, string(r.Key))
		}
		want := []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6"}[:min(limit, 7)]
		if !slices.Equal(got, want) {
			t.Errorf("a page of at most %d: %v, want %v", limit, got, want)
		}
	}
}
