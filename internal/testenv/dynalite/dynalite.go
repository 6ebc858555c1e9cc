// Package dynalite finds a DynamoDB-protocol server for the tests and
// benchmarks of the DynamoDB store and of the idemkit command: the endpoint in
// IDEMKIT_DYNAMODB_ENDPOINT when it is set (DynamoDB Local, real AWS, a dynalite
// started by hand), else a private dynalite process started here on a free
// loopback port, keeping its tables in memory.
//
// dynalite (an implementation of the DynamoDB API on LevelDB, from the npm
// registry) is looked for in the repository's .cache/dynalite, where
// .ci/install-dynalite (make dynalite) installs it, then as a dynalite command on
// PATH. A started server exits with the process that started it: it reads its
// standard input, a pipe from this process, and exits when the pipe closes,
// so a test binary killed by a signal leaves no server behind.
//
// Nothing here leaves a goroutine running: the port is read from a pipe with a
// deadline and Close waits for the process itself, so test binaries that check
// for leaked goroutines can use it.
package dynalite

import (
	"bufio"
	"errors"
	"fmt"
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
	stdin *os.File
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
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		_ = inR.Close()
		_ = inW.Close()
		return nil, err
	}
	cmd := exec.Command(node, "-e", script, dir)
	// os.File ends of pipes: exec copies nothing, so no goroutine runs for them.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a terminal's ^C reaches the test binary, which stops it
	err = cmd.Start()
	_ = inR.Close()
	_ = outW.Close()
	if err != nil {
		_ = inW.Close()
		_ = outR.Close()
		return nil, fmt.Errorf("dynalite: starting node: %w", err)
	}
	s := &Server{cmd: cmd, stdin: inW, Pid: cmd.Process.Pid}
	// The server prints its port once and nothing more; an exit before that
	// reads as the end of the pipe.
	_ = outR.SetReadDeadline(time.Now().Add(30 * time.Second))
	line, err := bufio.NewReader(outR).ReadString('\n')
	_ = outR.Close()
	p, ok := strings.CutPrefix(strings.TrimSpace(line), "port ")
	if _, perr := strconv.Atoi(p); err != nil || !ok || perr != nil {
		s.Close()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, errors.New("dynalite: the server did not listen within 30s")
		}
		return nil, fmt.Errorf("dynalite: the server in %s did not say its port (%q, %v; its error is above)", dir, line, err)
	}
	s.Endpoint = "http://127.0.0.1:" + p
	return s, nil
}

// Close stops a started server and waits for it to exit (killing it after 5 s);
// it does nothing for an external one.
func (s *Server) Close() {
	if s == nil || s.cmd == nil {
		return
	}
	_ = s.stdin.Close()
	kill := time.AfterFunc(5*time.Second, func() { _ = s.cmd.Process.Kill() })
	_ = s.cmd.Wait()
	kill.Stop()
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
