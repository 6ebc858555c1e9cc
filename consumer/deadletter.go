package consumer

import "strings"

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
