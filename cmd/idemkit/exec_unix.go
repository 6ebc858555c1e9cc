//go:build unix

package main

import (
	"os/exec"
	"sync/atomic"
	"syscall"
	"time"
)

// stopGroup runs cmd in a process group of its own and makes its cancellation
// stop the whole group: SIGTERM at once; whatever is left of the group when cmd
// has been waited for (at most grace later) gets SIGKILL from the returned
// function, which the caller calls after Wait. Without it, a child of sh (a
// script's own commands) would outlive the cancellation and act after the replay
// gave its message back, and Wait would wait for it, holding the shutdown.
func stopGroup(cmd *exec.Cmd, grace time.Duration) (after func()) {
	var cancelled atomic.Bool
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		cancelled.Store(true)
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	}
	cmd.WaitDelay = grace
	return func() {
		if cancelled.Load() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}
}
