package main

import (
	"context"
	"os"
)

// keygen prints the key a service derives with consumer.NewKey, so that an
// operator can find a record from business ids.
func Example() {
	run(context.Background(), []string{"keygen", "https://example.com/charges", "order", "42"}, os.Stdout, os.Stderr)
	// Output:
	// 51f0f6a2-e20a-5ff8-befa-0ae228098fb9
}
