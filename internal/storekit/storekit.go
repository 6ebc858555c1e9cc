// Package storekit holds what the stores of this module share that is not part
// of the store contract: the error a bad option or argument gets, and the answer
// of a call made on a nil store.
package storekit

import (
	"fmt"

	"github.com/idemkit/idemkit/consumer"
)

// ConfigError is an ErrInvalidConfig from store (its package name) that says what
// to change.
func ConfigError(store, format string, args ...any) error {
	return fmt.Errorf("%w: %s: "+format, append([]any{consumer.ErrInvalidConfig, store}, args...)...)
}

// NilStoreText is what a call on a nil store is told.
const NilStoreText = "nil store: make it with NewStore and check its error"

// NilStore answers n items of a call made on a nil store of package store: each
// gets with(an ErrInvalidConfig saying how to make one).
func NilStore[R any](store string, n int, with func(error) R) []R {
	err := ConfigError(store, NilStoreText)
	out := make([]R, n)
	for i := range out {
		out[i] = with(err)
	}
	return out
}
