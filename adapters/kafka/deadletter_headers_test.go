package kafka

import "testing"

// The dead-letter headers are a wire contract: consumers of the dead-letter
// topics of both Kafka adapters read them by these names, so a change of name is
// a breaking change to say in the CHANGELOG, never a side effect of a refactoring.
func TestDeadLetterHeaderNamesOnTheWire(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{HeaderOriginalTopic, "idemkit-original-topic"},
		{HeaderOriginalPartition, "idemkit-original-partition"},
		{HeaderOriginalOffset, "idemkit-original-offset"},
		{HeaderKey, "idemkit-key"},
		{HeaderAttempts, "idemkit-attempts"},
		{HeaderOutcome, "idemkit-outcome"},
		{HeaderError, "idemkit-error"},
		{HeaderKind, "idemkit-kind"},
		{HeaderBodyLess, "idemkit-body-less"},
	} {
		if c.got != c.want {
			t.Errorf("a dead-letter header is written as %q; consumers of dead-letter topics read %q", c.got, c.want)
		}
	}
	if MaxErrorHeader != 4<<10 {
		t.Errorf("MaxErrorHeader %d; the documented cap is 4 KiB", MaxErrorHeader)
	}
}
