package ordering_test

import (
	"math/rand/v2"
	"testing"

	"github.com/idemkit/idemkit/internal/ordering"
)

// SettleAll agrees with Settle one by one, whatever the order and the batches,
// also behind a position that stays unsettled for long.
func TestSettleAllAgreesWithSettle(t *testing.T) {
	var one, all ordering.Tracker
	const n = 5000
	for p := int64(1); p <= n; p++ {
		pos := p * 3 // gaps
		_ = one.Add(pos)
		_ = all.Add(pos)
	}
	stalled := int64(30)
	order := rand.Perm(n)
	var batch []int64
	for i, k := range order {
		pos := int64(k+1) * 3
		if pos == stalled {
			continue
		}
		want, wantMoved := one.Settle(pos)
		batch = append(batch, pos)
		if len(batch) < 1+i%7 {
			continue
		}
		got, _ := all.SettleAll(batch)
		batch = batch[:0]
		if got != want {
			t.Fatalf("after %d settled: SettleAll's prefix ends at %d, Settle's at %d (moved %v)", i, got, want, wantMoved)
		}
	}
	all.SettleAll(batch)
	if a, b := all.InFlight(), one.InFlight(); a != 1 || b != 1 {
		t.Fatalf("in flight: %d and %d, want the stalled one only", a, b)
	}
	if through, moved := all.SettleAll([]int64{stalled, 999999}); !moved || through != n*3 {
		t.Fatalf("the stalled one settled: through %d moved %v, want %d", through, moved, n*3)
	}
	if through, moved := all.SettleAll(nil); moved || through != n*3 {
		t.Fatalf("nothing settled: through %d moved %v", through, moved)
	}
}
