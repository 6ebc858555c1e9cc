//go:build linux

package testenv

import "syscall"

// serverAttr is how a private server the tests start is started: in a process
// group of its own, so a terminal's ^C reaches only the test binary (which stops
// it), and killed when the test binary dies without stopping it (a timeout, a
// crash, a benchmark that exits early), so that no server outlives its run.
// The kernel sends the signal when the thread that started the server ends; Go
// ends a thread only when a goroutine locked to it exits, which nothing here does.
func serverAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// ownerGone says the process pid has exited, and with it (Pdeathsig) every
// server it started.
func ownerGone(pid int) bool {
	return syscall.Kill(pid, 0) == syscall.ESRCH
}
