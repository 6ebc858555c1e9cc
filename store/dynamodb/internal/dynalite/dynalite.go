// Package dynalite finds a DynamoDB-protocol server for this module's tests and
// benchmark: the endpoint in IDEMKIT_DYNAMODB_ENDPOINT when it is set (DynamoDB
// Local, real AWS, a dynalite started by hand), else a private dynalite process
// started here on a free loopback port, keeping its tables in memory.
//
// dynalite (an implementation of the DynamoDB API on LevelDB, from the npm
// registry) is looked for in the repository's .cache/dynalite, where
// .ci/install-dynalite (make dynalite) installs it, then as a dynalite command on
// PATH. A started server exits with the process that started it: it reads its
// standard input, a pipe from this process, and exits when the pipe closes,
// so a test binary killed by a signal leaves no server behind.
package dynalite

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// EnvEndpoint names the environment variable with a server's endpoint URL.
const EnvEndpoint = "IDEMKIT_DYNAMODB_ENDPOINT"

// Server is a DynamoDB-protocol endpoint: an external one, or a dynalite process
// started by Start.
type Server struct {
	// Endpoint is the server's URL (http://127.0.0.1:port).
	Endpoint string
	// External says the endpoint came from IDEMKIT_DYNAMODB_ENDPOINT: nothing was
	// started, and Pid is 0.
	External bool
	// Pid is the started node process's id, for reading its CPU time from /proc.
	Pid int

	cmd   *exec.Cmd
	stdin io.Closer
	done  chan struct{}
}

// Find returns the server named by IDEMKIT_DYNAMODB_ENDPOINT, or a dynalite
// started here. The error says what is missing and how to provide it.
func Find() (*Server, error) {
	if ep := strings.TrimSpace(os.Getenv(EnvEndpoint)); ep != "" {
		return &Server{Endpoint: strings.TrimRight(ep, "/"), External: true}, nil
	}
	return Start()
}

// Start starts a private dynalite on a free loopback port, its tables in
// memory, and waits until it listens.
func Start() (*Server, error) {
	dir, err := packageDir()
	if err != nil {
		return nil, err
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("dynalite: node is not on PATH (Debian: apt-get install nodejs npm): %w", err)
	}
	// Tables are ready at once (no CREATING state), the port is the kernel's
	// choice, and the server exits when its standard input closes.
	script := `var d = require(process.argv[1]);
var s = d({createTableMs: 0, deleteTableMs: 0, updateTableMs: 0});
s.listen(0, '127.0.0.1', function () { console.log('port ' + s.address().port); });
process.stdin.on('end', function () { process.exit(0); });
process.stdin.on('error', function () { process.exit(0); });
process.stdin.resume();`
	cmd := exec.Command(node, "-e", script, dir)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a terminal's ^C reaches the test binary, which stops it
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("dynalite: starting node: %w", err)
	}
	s := &Server{cmd: cmd, stdin: stdin, Pid: cmd.Process.Pid, done: make(chan struct{})}
	port := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if p, ok := strings.CutPrefix(sc.Text(), "port "); ok {
				port <- p
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()
	select {
	case p := <-port:
		if _, err := strconv.Atoi(p); err != nil {
			s.Close()
			return nil, fmt.Errorf("dynalite: unexpected port %q", p)
		}
		s.Endpoint = "http://127.0.0.1:" + p
		return s, nil
	case <-s.done:
		return nil, fmt.Errorf("dynalite: the server in %s exited before listening (its error is above)", dir)
	case <-time.After(30 * time.Second):
		s.Close()
		return nil, errors.New("dynalite: the server did not listen within 30s")
	}
}

// Close stops a started server and waits for it to exit; it does nothing for
// an external one.
func (s *Server) Close() {
	if s == nil || s.cmd == nil {
		return
	}
	_ = s.stdin.Close()
	select {
	case <-s.done:
		return
	case <-time.After(5 * time.Second):
	}
	_ = s.cmd.Process.Kill()
	<-s.done
}

// packageDir finds the installed dynalite package: the repository's
// .cache/dynalite first (from the working directory upwards), then the
// dynalite command on PATH.
func packageDir() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		p := filepath.Join(d, ".cache", "dynalite", "node_modules", "dynalite")
		if _, err := os.Stat(filepath.Join(p, "index.js")); err == nil {
			return p, nil
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	if bin, err := exec.LookPath("dynalite"); err == nil {
		if real, err := filepath.EvalSymlinks(bin); err == nil {
			p := filepath.Dir(real)
			if _, err := os.Stat(filepath.Join(p, "index.js")); err == nil {
				return p, nil
			}
		}
	}
	return "", errors.New("dynalite: not installed: run `make dynalite` (npm installs it into the repository's .cache/dynalite), " +
		"or set " + EnvEndpoint + " to a DynamoDB endpoint (DynamoDB Local, AWS)")
}
