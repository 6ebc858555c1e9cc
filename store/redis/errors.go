package redis

import "github.com/idemkit/idemkit/internal/storekit"

// configError is an ErrInvalidConfig that says what to change.
func configError(format string, args ...any) error {
	return storekit.ConfigError("redis", format, args...)
}

// errNilStore answers every call on a nil store.
var errNilStore = storekit.ConfigError("redis", storekit.NilStoreText)

// nilStore answers n items of a call on a nil store.
func nilStore[R any](n int, with func(error) R) []R { return storekit.NilStore("redis", n, with) }
