package postgres

import "reflect"

// isNilPointer reports whether v is an interface holding a nil pointer.
func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}
