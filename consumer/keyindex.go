package consumer

import "hash/maphash"

// keyIndex finds, for each item of a batch in turn, the first item with the same
// key: an open-addressing table of item indexes that hashes each key once (a map
// from key to index hashes it twice, to look it up and then to add it). It is
// kept in the batch's scratch and reused.
type keyIndex struct {
	slots []int // 1 + an item's index; 0 is empty
}

// keySeed seeds every keyIndex's hash.
var keySeed = maphash.MakeSeed()

// reset empties x for up to n keys: its table stays at most half full.
func (x *keyIndex) reset(n int) {
	size := 16
	for size < 2*n {
		size <<= 1
	}
	if cap(x.slots) < size {
		x.slots = make([]int, size)
		return
	}
	x.slots = x.slots[:size]
	clear(x.slots)
}

// first returns the index of the first item of items added with item i's key,
// or adds item i and returns i.
func (x *keyIndex) first(items []BatchItem, i int) int {
	k := items[i].Key
	mask := uint64(len(x.slots) - 1)
	for h := maphash.String(keySeed, string(k)) & mask; ; h = (h + 1) & mask {
		switch e := x.slots[h]; {
		case e == 0:
			x.slots[h] = i + 1
			return i
		case items[e-1].Key == k:
			return e - 1
		}
	}
}
