package consumer

import (
	"strconv"
	"testing"
)

// TestNext36 checks that counting up in place gives what strconv formats, across
// carries and a growing number of digits.
func TestNext36(t *testing.T) {
	for _, from := range []uint64{0, 1, 9, 10, 34, 35, 36, 1294, 1295, 46655, 1<<40 - 3} {
		var buf [14]byte
		d := strconv.AppendUint(buf[:0], from, 36)
		for n := from; n < from+80; n++ {
			if got, want := string(d), strconv.FormatUint(n, 36); got != want {
				t.Fatalf("counting up from %d: got %q at %d, want %q", from, got, n, want)
			}
			d = next36(d)
		}
	}
}

// TestNewOwners checks that a batch of owner tokens is the prefix and
// consecutive numbers, each token distinct.
func TestNewOwners(t *testing.T) {
	for _, n := range []int{1, 2, 100, 2000} {
		got := make([]string, n)
		newOwners(n, func(i int, owner string) { got[i] = owner })
		first, err := strconv.ParseUint(got[0][len(ownerPrefix):], 36, 64)
		if err != nil {
			t.Fatalf("batch of %d: first token %q: %v", n, got[0], err)
		}
		for i, o := range got {
			if want := ownerPrefix + strconv.FormatUint(first+uint64(i), 36); o != want {
				t.Fatalf("batch of %d: token %d is %q, want %q", n, i, o, want)
			}
		}
	}
}
