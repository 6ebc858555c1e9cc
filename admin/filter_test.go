package admin_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/consumer"
)

// TestListFilters checks List's owner, key, lease and error-kind filters, and the
// breakdowns Stats gives (by scope, failed by kind, the newest operator notes),
// on the fleet of a dead replica.
func TestListFilters(t *testing.T) {
	for _, b := range fleetBackends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			f := newFleet(t, b)
			cases := []struct {
				name string
				q    admin.Query
				want int
			}{
				{"owner prefix", admin.Query{OwnerPrefix: "replica-7-"}, deadCount},
				{"owner prefix and lease ran out", admin.Query{OwnerPrefix: "replica-", LeaseRanOut: true}, deadCount + 5},
				{"key prefix", admin.Query{KeyPrefix: "done-"}, 40},
				{"permanent", admin.Query{ErrorKind: "Permanent"}, 20},
				{"exhausted", admin.Query{ErrorKind: admin.KindExhausted}, 0},
				{"key prefix and state", admin.Query{KeyPrefix: "again-", States: []string{"retry"}}, 10},
				{"key prefix and another state", admin.Query{KeyPrefix: "again-", States: []string{"failed"}}, 0},
			}
			for _, tc := range cases {
				tc.q.Scope, tc.q.Limit = fleetScope, 1000
				page, err := f.in.List(ctx, tc.q)
				if err != nil || page.Next != "" || len(page.Records) != tc.want {
					t.Errorf("%s: %d records, next %q, %v; want %d", tc.name, len(page.Records), page.Next, err, tc.want)
				}
			}
			if _, err := f.in.List(ctx, admin.Query{ErrorKind: "flaky"}); !errors.Is(err, admin.ErrInvalid) {
				t.Errorf("an unknown error kind: %v", err)
			}

			for i := range 3 {
				k := consumer.Key(fmt.Sprintf("bad-%02d", i))
				if _, err := f.in.Rerun(ctx, admin.Change{Scope: fleetScope, Key: k, Actor: "alice", Reason: fmt.Sprint("fixed ", i)}); err != nil {
					t.Fatal(err)
				}
			}
			st, err := f.in.Stats(ctx, admin.StatsQuery{MaxNotes: 2})
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(st.ByScope); got != fmt.Sprint(map[string]map[string]int{fleetScope: {"started": 66, "completed": 40, "failed": 17, "retry": 13}}) {
				t.Errorf("by scope: %s", got)
			}
			if got := fmt.Sprint(st.FailedByKind); got != fmt.Sprint(map[string]int{admin.KindPermanent: 17}) {
				t.Errorf("failed by kind: %s", got)
			}
			if len(st.Notes) != 2 {
				t.Fatalf("notes: %+v", st.Notes)
			}
			for _, n := range st.Notes {
				if n.Scope != fleetScope || n.Text[:len("rerun by alice: fixed ")] != "rerun by alice: fixed " {
					t.Errorf("note: %+v", n)
				}
			}
		})
	}
}
