package consumer

import (
	"fmt"
	"unicode/utf8"
)

// Limits every store keeps to, so that a record reads the same from each: the
// last error of a record is cut to MaxErrorText bytes, the HistoryLen-1 before it
// to HistoryText; the newest NotesLen operator notes are kept, each cut to
// MaxNoteText bytes. Texts are cut with CapText.
const (
	MaxErrorText = 8 << 10
	HistoryLen   = 4
	HistoryText  = 256
	NotesLen     = 8
	MaxNoteText  = 1280
)

// CapText cuts s to at most max bytes, ending it with a marker that says how long
// it was (" ... [cut from 16384 bytes]"). The cut falls on a UTF-8 character
// boundary. Stores cut error texts and notes with it, adapters the texts they copy
// into headers.
func CapText(s string, max int) string {
	if len(s) <= max {
		return s
	}
	marker := fmt.Sprintf(" ... [cut from %d bytes]", len(s))
	cut := max - len(marker)
	if cut < 0 {
		cut = 0
	}
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + marker
}
