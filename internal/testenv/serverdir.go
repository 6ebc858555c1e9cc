package testenv

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// ownerFile names the file in a server's directory that holds the pid of the
// process that started the server.
const ownerFile = "owner.pid"

var sweepOnce sync.Once

// serverDir makes a temporary directory for a private server (its files and
// log), named from pattern as os.MkdirTemp does, with the pid of this process in
// it. The first call of a process first removes the directories that earlier
// processes left: a server started with Pdeathsig dies with the test binary that
// started it, but a binary that dies (a timeout, SIGKILL) removes nothing.
func serverDir(pattern string) (string, error) {
	sweepOnce.Do(sweepServerDirs)
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// sweepServerDirs removes the server directories whose starting process has
// exited, where its servers died with it (see ownerGone).
func sweepServerDirs() {
	for _, pattern := range []string{"idemkit-redis-*", "idemkit-sentinel-*"} {
		dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), pattern))
		for _, dir := range dirs {
			b, err := os.ReadFile(filepath.Join(dir, ownerFile))
			if err != nil {
				continue // not one of ours, or being made
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err == nil && pid != os.Getpid() && ownerGone(pid) {
				_ = os.RemoveAll(dir)
			}
		}
	}
}
