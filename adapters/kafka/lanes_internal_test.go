package kafka

import (
	"math/rand/v2"
	"testing"

	"github.com/idemkit/idemkit/internal/ordering"
)

// laneTable runs the records of each lane in the order pushed, one at a time, as
// ordering.Lanes does, through any mix of pushes and finishes, with lane names
// whose low bits collide (long probes, removals in the middle of a run) and
// through the table's growth.
func TestLaneTableAgreesWithLanes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var got laneTable[struct{}]
	var want ordering.Lanes[uint64, *record[struct{}]]
	running := map[uint64]bool{} // lanes with a running record
	var names []uint64
	for i := range 300 {
		// Every name shares its low 6 bits with many others.
		names = append(names, uint64(i%7)|uint64(rng.IntN(1<<20))<<6)
	}
	for step := range 200000 {
		name := names[rng.IntN(len(names))]
		if rng.IntN(2) == 0 && step < 150000 {
			r := &record[struct{}]{lane: name}
			g, w := got.push(name, r), want.Push(name, r)
			if g != w {
				t.Fatalf("step %d: push to lane %x runs at once: %v, want %v", step, name, g, w)
			}
			if g {
				running[name] = true
			}
			continue
		}
		if !running[name] {
			continue
		}
		g, gok := got.done(name)
		w, wok := want.Done(name)
		if g != w || gok != wok {
			t.Fatalf("step %d: done on lane %x gave %p %v, want %p %v", step, name, g, gok, w, wok)
		}
		running[name] = gok
	}
	if got.busy != want.Busy() {
		t.Fatalf("busy lanes: %d, want %d", got.busy, want.Busy())
	}
	for name := range running {
		for running[name] {
			g, gok := got.done(name)
			w, wok := want.Done(name)
			if g != w || gok != wok {
				t.Fatalf("draining lane %x: %p %v, want %p %v", name, g, gok, w, wok)
			}
			running[name] = gok
		}
	}
	if got.busy != 0 || want.Busy() != 0 {
		t.Fatalf("busy lanes after draining: %d and %d", got.busy, want.Busy())
	}
	if _, ok := got.done(names[0]); ok {
		t.Fatal("an idle lane has nothing to run")
	}
}

// BenchmarkLanes finishes and pushes records over a window of busy lanes, with the
// table and with ordering.Lanes (the map it replaces).

func BenchmarkLanes(b *testing.B) {
	const window = 2048
	names := make([]uint64, 1<<16)
	for i := range names {
		names[i] = rand.Uint64()
	}
	recs := make([]record[struct{}], window)
	b.Run("table", func(b *testing.B) {
		var t laneTable[struct{}]
		for i := range window {
			t.push(names[i], &recs[i])
		}
		for i := 0; b.Loop(); i++ {
			t.done(names[i%len(names)])
			t.push(names[(i+window)%len(names)], &recs[i%window])
		}
	})
	b.Run("map", func(b *testing.B) {
		var t ordering.Lanes[uint64, *record[struct{}]]
		for i := range window {
			t.Push(names[i], &recs[i])
		}
		for i := 0; b.Loop(); i++ {
			t.Done(names[i%len(names)])
			t.Push(names[(i+window)%len(names)], &recs[i%window])
		}
	})
}
