package redis

import (
	"fmt"

	"github.com/idemkit/idemkit/consumer"
)

// configError is an ErrInvalidConfig that says what to change.
func configError(format string, args ...any) error {
	return fmt.Errorf("%w: redis: "+format, append([]any{consumer.ErrInvalidConfig}, args...)...)
}

// errNilStore answers every call on a nil store.
var errNilStore = configError("nil store: make it with NewStore and check its error")

// nilStore answers n items of a call on a nil store.
func nilStore[R any](n int, with func(error) R) []R {
	out := make([]R, n)
	for i := range out {
		out[i] = with(errNilStore)
	}
	return out
}
