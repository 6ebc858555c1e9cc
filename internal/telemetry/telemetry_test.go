package telemetry

import (
	"sync"
	"testing"
	"time"
)

func TestSeriesMakesEachValueOnce(t *testing.T) {
	var made int
	var mu sync.Mutex
	s := NewSeries(func(k string) *int { mu.Lock(); made++; mu.Unlock(); v := len(k); return &v })
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, k := range []string{"a", "bb", "a", "ccc", "bb"} {
				if *s.Get(k) != len(k) {
					t.Errorf("Get(%q) = %d", k, *s.Get(k))
				}
			}
		}()
	}
	wg.Wait()
	if made != 3 || len(s.Values()) != 3 {
		t.Fatalf("made %d values, %d kept; want 3 and 3", made, len(s.Values()))
	}
}

func TestLagTableBoundsAndExpires(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	tab := NewLagTable(2, time.Minute, clock, func(p Partition) string { return p.Topic })
	tab.Set("a", 0, 5)
	now = now.Add(time.Second)
	tab.Set("b", 0, 7)
	now = now.Add(time.Second)
	tab.Set("c", 1, 9) // the table is full: a, the least recently reported, goes
	got := map[Partition]int64{}
	tab.Each(func(p Partition, lag int64, extra string) {
		if extra != p.Topic {
			t.Errorf("extra of %v = %q", p, extra)
		}
		got[p] = lag
	})
	if len(got) != 2 || got[Partition{"b", 0}] != 7 || got[Partition{"c", 1}] != 9 {
		t.Fatalf("partitions = %v, want b/0=7 and c/1=9", got)
	}
	now = now.Add(time.Minute - 500*time.Millisecond) // b, reported a second before c, expires
	got = map[Partition]int64{}
	tab.Each(func(p Partition, lag int64, _ string) { got[p] = lag })
	if len(got) != 1 || got[Partition{"c", 1}] != 9 {
		t.Fatalf("after b's expiry: %v, want c/1 only", got)
	}
}
