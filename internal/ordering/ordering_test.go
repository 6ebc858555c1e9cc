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

// Lanes keyed by a struct keep each lane's order and tell lanes apart by every
// field; a lane's last waiting message leaves it idle once done.
func TestLanesByComparableKey(t *testing.T) {
	type lane struct {
		part int32
		key  uint64
	}
	var l ordering.Lanes[lane, int]
	a, b := lane{0, 7}, lane{1, 7}
	if !l.Push(a, 1) || !l.Push(b, 10) {
		t.Fatal("the first message of an idle lane runs at once")
	}
	if l.Push(a, 2) || l.Push(a, 3) || l.Push(b, 11) {
		t.Fatal("a busy lane's messages wait")
	}
	want := map[lane][]int{a: {1, 2, 3}, b: {10, 11}}
	for ln, order := range want {
		ran := []int{order[0]}
		for {
			next, ok := l.Done(ln)
			if !ok {
				break
			}
			ran = append(ran, next)
		}
		if len(ran) != len(order) {
			t.Fatalf("lane %v ran %v, want %v", ln, ran, order)
		}
		for i := range order {
			if ran[i] != order[i] {
				t.Fatalf("lane %v ran %v, want %v", ln, ran, order)
			}
		}
	}
	if l.Busy() != 0 {
		t.Fatalf("busy lanes after every message finished: %d, want 0", l.Busy())
	}
	if !l.Push(a, 4) {
		t.Fatal("an idle lane runs its next message at once")
	}
	if _, ok := l.Done(lane{2, 7}); ok {
		t.Fatal("a lane never pushed has nothing to run")
	}
}

// Settle finds each position among thousands in flight, in any order, and the
// prefix ends exactly after the last settled run.
func TestTrackerManyInFlight(t *testing.T) {
	var tr ordering.Tracker
	const n = 5000
	for i := int64(0); i < n; i++ {
		_ = tr.Add(1000 + 3*i) // gaps: compaction
	}
	for _, i := range rand.Perm(n) {
		if i == n/2 {
			continue
		}
		tr.Settle(1000 + 3*int64(i))
	}
	tr.Settle(7) // never added: changes nothing
	if through, _ := tr.Through(); through != 1000+3*(n/2-1) || tr.InFlight() != 1 {
		t.Fatalf("through %d in flight %d, want %d and 1", through, tr.InFlight(), 1000+3*(n/2-1))
	}
	if through, moved := tr.Settle(1000 + 3*n/2); !moved || through != 1000+3*(n-1) {
		t.Fatalf("through %d moved %v, want %d", through, moved, 1000+3*(n-1))
	}
}
