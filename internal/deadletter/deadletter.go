// Package deadletter holds what the broker adapters share in writing the copies
// they produce (dead letters, retries): the cut of error texts copied into their
// headers.
package deadletter

import "strconv"

// CapText cuts s to at most max bytes, ending it with a marker that says how many
// bytes were cut, for error texts copied into headers. The cut falls on a UTF-8
// character boundary.
func CapText(s string, max int) string {
	if len(s) <= max {
		return s
	}
	room := max - len("... [ bytes cut]") - 20
	if room < 0 {
		room = 0
	}
	for room > 0 && room < len(s) && !utf8Start(s[room]) {
		room--
	}
	return s[:room] + "... [" + strconv.Itoa(len(s)-room) + " bytes cut]"
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }
