package deadletter

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// A text within the bound is kept whole; a longer one is cut to the bound on a
// character boundary and says how much was cut.
func TestCapText(t *testing.T) {
	for _, c := range []struct {
		name, s string
		max     int
		want    string
	}{
		{"short", "declined", 64, "declined"},
		{"exact", strings.Repeat("a", 64), 64, strings.Repeat("a", 64)},
		{"long", strings.Repeat("a", 100), 64, strings.Repeat("a", 28) + "... [72 bytes cut]"},
		{"multibyte", strings.Repeat("é", 50), 64, strings.Repeat("é", 14) + "... [72 bytes cut]"},
	} {
		got := CapText(c.s, c.max)
		if got != c.want || !utf8.ValidString(got) {
			t.Errorf("%s: CapText = %q, want %q", c.name, got, c.want)
		}
	}
}
