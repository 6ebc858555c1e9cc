package consumer

import (
	"strconv"
	"testing"
)

// TestKeyIndex checks that keyIndex finds the first item of each key as a map
// does, over batches of several sizes (reusing one table) with repeated keys.
func TestKeyIndex(t *testing.T) {
	var x keyIndex
	for _, n := range []int{2, 3, 17, 100, 1000, 5} {
		items := make([]BatchItem, n)
		for i := range items {
			items[i].Key = Key("key-" + strconv.Itoa(i*7%(n/2+1)))
		}
		x.reset(n)
		want := map[Key]int{}
		for i, it := range items {
			w, ok := want[it.Key]
			if !ok {
				want[it.Key], w = i, i
			}
			if got := x.first(items, i); got != w {
				t.Fatalf("batch of %d: item %d (%s): first %d, want %d", n, i, it.Key, got, w)
			}
		}
	}
}
