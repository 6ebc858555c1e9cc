//go:build !unix

package main

import (
	"os/exec"
	"time"
)

// stopGroup bounds how long a cancelled cmd's Wait waits for the processes it
// started to let go of its output (no process groups here).
func stopGroup(cmd *exec.Cmd, grace time.Duration) (after func()) {
	cmd.WaitDelay = grace
	return func() {}
}
