//go:build linux

package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// The sweep removes the server directories of processes that have exited and
// keeps those of live ones, this process's among them.
func TestSweepRemovesTheDirsOfExitedProcesses(t *testing.T) {
	exited := exec.Command("true")
	if err := exited.Run(); err != nil {
		t.Fatal(err)
	}
	live := exec.Command("sleep", "60")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = live.Process.Kill(); _ = live.Wait() })

	made := func(pattern string, pid int) string {
		dir, err := os.MkdirTemp("", pattern)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		if pid > 0 {
			if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(pid)), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	gone := []string{made("idemkit-redis-", exited.Process.Pid), made("idemkit-sentinel-", exited.Process.Pid)}
	kept := []string{
		made("idemkit-redis-", live.Process.Pid),
		made("idemkit-redis-", os.Getpid()),
		made("idemkit-redis-", 0), // no owner file: not one serverDir made
		made("idemkit-other-", exited.Process.Pid),
	}
	sweepServerDirs()
	for _, dir := range gone {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s of an exited process is still there (%v)", dir, err)
		}
	}
	for _, dir := range kept {
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("%s was removed: %v", dir, err)
		}
	}
}
