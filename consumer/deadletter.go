package consumer

import (
	"strconv"
	"strings"
)

// DeadLetterKind is the machine-readable reason adapters write into a dead-letter
// copy's headers: ErrorKind in upper case (PERMANENT, CONFLICT, EXHAUSTED,
// CORRUPT, HANDLER, ...). Adapters add their own kinds for messages that never
// reached the store (UNDECODABLE, NO_KEY).
func DeadLetterKind(err error) string {
	k := ErrorKind(err)
	if k == "" {
		return "UNKNOWN"
	}
	return strings.ToUpper(k)
}

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
