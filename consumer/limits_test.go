package consumer_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemkit/idemkit/consumer"
)

func TestCapText(t *testing.T) {
	if got := consumer.CapText("short", consumer.MaxErrorText); got != "short" {
		t.Fatal(got)
	}
	long := strings.Repeat("é", consumer.MaxErrorText) // 2 bytes each: a cut may fall inside one
	got := consumer.CapText(long, consumer.MaxErrorText)
	if len(got) > consumer.MaxErrorText || !utf8.ValidString(got) || !strings.HasSuffix(got, " ... [cut from 16384 bytes]") {
		t.Fatalf("capped to %d bytes, valid UTF-8 %v, ends %q", len(got), utf8.ValidString(got), got[len(got)-30:])
	}
	if got := consumer.CapText(long, 5); len(got) > len(" ... [cut from 16384 bytes]") {
		t.Fatalf("a limit shorter than the marker: %q", got)
	}
}
