package ordering_test

import (
	"math/rand/v2"
	"testing"

	"github.com/idemkit/idemkit/internal/ordering"
)

func TestSequencerKeepsLaneOrder(t *testing.T) {
	s := ordering.NewSequencer[int]()
	var ran []int
	if !s.Push("a", 1) || !s.Push("b", 10) {
		t.Fatal("the first message of an idle lane runs at once")
	}
	if s.Push("a", 2) || s.Push("a", 3) {
		t.Fatal("a busy lane's messages wait")
	}
	ran = append(ran, 1)
	for {
		next, ok := s.Done("a")
		if !ok {
			break
		}
		ran = append(ran, next)
	}
	if len(ran) != 3 || ran[0] != 1 || ran[1] != 2 || ran[2] != 3 {
		t.Fatalf("lane a ran %v, want [1 2 3]", ran)
	}
	if s.Busy() != 1 {
		t.Fatalf("busy lanes: %d, want b only", s.Busy())
	}
	s.Push("b", 11)
	if dropped := s.Drop(func(l string) bool { return l == "b" }); len(dropped) != 1 || dropped[0] != 11 {
		t.Fatalf("dropped %v", dropped)
	}
	if s.Busy() != 0 {
		t.Fatal("dropped lanes are gone")
	}
}

// Positions settled in any order advance the prefix only over unbroken runs.
func TestTrackerPrefix(t *testing.T) {
	var tr ordering.Tracker
	if _, ok := tr.Through(); ok {
		t.Fatal("nothing added yet")
	}
	for p := int64(100); p < 110; p++ {
		if err := tr.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.Add(105); err == nil {
		t.Fatal("a position out of order must be refused")
	}
	if through, moved := tr.Settle(101); moved || through != 99 {
		t.Fatalf("101 before 100: through %d moved %v", through, moved)
	}
	if through, moved := tr.Settle(100); !moved || through != 101 {
		t.Fatalf("then 100: through %d moved %v", through, moved)
	}
	order := rand.Perm(8)
	last := int64(101)
	for _, i := range order {
		through, _ := tr.Settle(int64(102 + i))
		if through < last {
			t.Fatalf("the prefix went back from %d to %d", last, through)
		}
		last = through
	}
	if through, _ := tr.Through(); through != 109 || tr.InFlight() != 0 {
		t.Fatalf("through %d, in flight %d", through, tr.InFlight())
	}
}

// Gaps in positions (Kafka compaction, transaction markers) are fine: only the
// added positions count.
func TestTrackerGaps(t *testing.T) {
	var tr ordering.Tracker
	for _, p := range []int64{5, 9, 12} {
		_ = tr.Add(p)
	}
	tr.Settle(9)
	tr.Settle(5)
	if through, _ := tr.Through(); through != 9 {
		t.Fatalf("through %d, want 9", through)
	}
	for i := int64(0); i < 5000; i++ {
		_ = tr.Add(100 + i)
		tr.Settle(100 + i)
	}
	if through, _ := tr.Through(); through != 9 || tr.InFlight() != 1 {
		t.Fatalf("12 is still in flight: through %d in flight %d", through, tr.InFlight())
	}
}
