package testenv

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// StartSelf runs this test binary again as a child process with env added to the
// environment and no tests selected, so that its TestMain can play a worker, a
// member or a lock holder that a test then kills or stops. The child is resumed
// (in case it was stopped), killed and reaped when t ends.
func StartSelf(t testing.TB, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}
