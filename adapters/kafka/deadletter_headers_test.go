package kafka

import (
	"testing"

	"github.com/idemkit/idemkit/internal/kafkadl"
)

// The dead-letter headers this package exports are the ones its copies carry
// (built in internal/kafkadl, shared with the share-group adapter).
func TestDeadLetterHeaderNamesAreTheSharedOnes(t *testing.T) {
	for _, c := range []struct{ ours, shared string }{
		{HeaderOriginalTopic, kafkadl.HeaderOriginalTopic},
		{HeaderOriginalPartition, kafkadl.HeaderOriginalPartition},
		{HeaderOriginalOffset, kafkadl.HeaderOriginalOffset},
		{HeaderKey, kafkadl.HeaderKey},
		{HeaderAttempts, kafkadl.HeaderAttempts},
		{HeaderOutcome, kafkadl.HeaderOutcome},
		{HeaderError, kafkadl.HeaderError},
		{HeaderKind, kafkadl.HeaderKind},
		{HeaderBodyLess, kafkadl.HeaderBodyLess},
	} {
		if c.ours != c.shared {
			t.Errorf("header %q is written as %q", c.ours, c.shared)
		}
	}
	if MaxErrorHeader != kafkadl.MaxErrorHeader {
		t.Errorf("MaxErrorHeader %d, copies cap at %d", MaxErrorHeader, kafkadl.MaxErrorHeader)
	}
}
