package consumer

import "sync"

// scratch holds the per-batch working slices that never leave the library (stores
// may not keep what they are given; see Store), reused across calls so that a
// batch allocates little beyond what it returns. Handler contexts are never
// reused: a handler may keep its context after it returns.
type scratch struct {
	fps     []Fingerprint
	leader  []int
	pending []int
	seen    keyIndex // by key, its first item
	claims  []Claim
	reps    []ClaimReply // the claims' answers, from a store that implements StoreInto
	run     []int
	idx     []int
	leases  []*lease // a pass's keeper's (nil each)
	// attempts is the last pass's []attempt[T], for the next pass of the same T
	// (zeroed; their handler contexts are not in it), and all its []*attempt[T].
	attempts, all any
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

func getScratch() *scratch { return scratchPool.Get().(*scratch) }

// put gives sc back for another batch, unless a huge batch made it too big to keep.
func (sc *scratch) put() {
	if cap(sc.claims) > 4096 || cap(sc.reps) > 4096 || cap(sc.seen.slots) > 8192 {
		return
	}
	clear(sc.claims[:cap(sc.claims)]) // drop references to keys
	clear(sc.reps[:cap(sc.reps)])     // and to records' keys and results
	scratchPool.Put(sc)
}

// sized returns s with length n and every element zero, reusing its array when big enough.
func sized[E any](s []E, n int) []E {
	if cap(s) < n {
		return make([]E, n)
	}
	s = s[:n]
	clear(s)
	return s
}
