package amqp

import (
	"testing"
	"time"
)

// Which held tags the acker acks one by one in a round: none while they linger
// under the cap; past the cap, down to half of it; once the oldest has lingered
// out, each that has waited half as long; all once the acks are closed.
func TestAloneBursts(t *testing.T) {
	now := time.Unix(1000, 0)
	held := func(ages ...time.Duration) []heldTag {
		out := make([]heldTag, len(ages))
		for i, a := range ages {
			out[i] = heldTag{tag: uint64(i + 1), since: now.Add(-a)}
		}
		return out
	}
	ms := time.Millisecond
	cases := []struct {
		name    string
		held    []heldTag
		open    bool
		maxHeld int
		want    int
	}{
		{"nothing held", nil, true, 32, 0},
		{"young, under the cap", held(4*ms, 3*ms, 1*ms), true, 32, 0},
		{"the oldest lingered out: with it those past half the linger", held(6*ms, 5*ms, 3*ms, 2*ms, 1*ms), true, 32, 3},
		{"the oldest lingered out alone", held(5*ms, 2*ms, 1*ms), true, 32, 1},
		{"past the cap: down to half of it", held(make([]time.Duration, 33)...), true, 32, 33 - 16},
		{"at the cap: none", held(make([]time.Duration, 32)...), true, 32, 0},
		{"a cap of 1: all", held(0, 0), true, 1, 2},
		{"closed: all", held(0, 0, 0), false, 32, 3},
	}
	for _, c := range cases {
		if got := alone(c.held, c.open, c.maxHeld, now); got != c.want {
			t.Errorf("%s: alone = %d, want %d", c.name, got, c.want)
		}
	}
}
