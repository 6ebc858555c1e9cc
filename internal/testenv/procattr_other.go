//go:build !linux

package testenv

import "syscall"

// serverAttr is how a private server the tests start is started: in a process
// group of its own, so a terminal's ^C reaches only the test binary, which stops
// it. (Only Linux can also have it killed when the test binary dies.)
func serverAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// ownerGone is false: without Pdeathsig a server may outlive the process that
// started it, and still use its directory.
func ownerGone(int) bool { return false }
