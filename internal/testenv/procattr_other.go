//go:build !linux

package testenv

import "syscall"

// serverAttr is how a private server the tests start is started: in a process
// group of its own, so a terminal's ^C reaches only the test binary, which stops
// it. (Only Linux can also have it killed when the test binary dies.)
func serverAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
