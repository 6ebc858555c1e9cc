// Package typednil tells whether an interface value holds a nil pointer: a typed
// nil, which a comparison of the interface with nil does not catch. Constructors
// use it to refuse a nil store, client or clock with a clear error instead of a
// panic on first use.
package typednil

import "reflect"

// Is reports whether v holds a nil pointer.
func Is(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}
