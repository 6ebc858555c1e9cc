package lua

import "time"

// NativeCAS reports whether r sends the completions of fresh claims as SET IFEQ.
func NativeCAS(r *Runner) bool { return r.cas.Load() == casYes }

// ForceCAS makes r send completions of fresh claims as SET IFEQ (on), or to the
// script for the next hour (off), whatever its servers said.
func ForceCAS(r *Runner, on bool) {
	if on {
		r.cas.Store(casYes)
	} else {
		r.cas.Store(time.Now().Add(time.Hour).UnixNano())
	}
}
