package main

import (
	"context"
	"io"
	"testing"
)

// Every payment is charged once though pay-1 and pay-2 arrive twice, and the
// poison event charges nothing.
func TestEachPaymentChargedOnce(t *testing.T) {
	charges, err := run(context.Background(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"pay-1": 1, "pay-2": 1, "pay-3": 1}
	if len(charges) != len(want) {
		t.Fatalf("charges %v, want %v", charges, want)
	}
	for id, n := range want {
		if charges[id] != n {
			t.Errorf("%s charged %d times, want %d", id, charges[id], n)
		}
	}
}
