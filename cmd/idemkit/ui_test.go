package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
)

// TestUIServes starts idemkit ui on a free port over a Redis with a stuck and a
// completed record: the pages answer, a change is refused (read-only), and
// SIGINT stops it with exit 0. With --allow-changes it unsticks the record from
// its page, recorded as --actor.
func TestUIServes(t *testing.T) {
	addr, prefix := testenv.RedisAddr(t), testenv.Prefix(t)
	s, err := redisstore.NewStore(testenv.Redis(t), consumer.WithPrefix(prefix), consumer.WithScope("payments"), consumer.WithLease(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if rep := s.Begin(context.Background(), []consumer.Claim{{Key: "order-42", Owner: "dead", Start: true}})[0]; !rep.Claimed() {
		t.Fatalf("claim: %+v", rep)
	}
	flags := []string{"--redis", addr, "--prefix", prefix}

	base, stop := serveUI(t, append([]string{"ui", "--listen", "127.0.0.1:0"}, flags...)...)
	body := httpGet(t, base+"/records?state=started", http.StatusOK)
	if !strings.Contains(body, "order-42") || !strings.Contains(body, "read-only") || strings.Contains(body, `method="post"`) {
		t.Fatalf("records page:\n%s", body)
	}
	httpGet(t, base+"/", http.StatusOK)
	httpGet(t, base+"/robots.txt", http.StatusOK)
	resp, err := http.PostForm(base+"/record/unstick", url.Values{"scope": {"payments"}, "key": {"order-42"}, "fence": {"1"}, "reason": {"r"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a change on a read-only UI: %d", resp.StatusCode)
	}
	if code := stop(); code != 0 {
		t.Fatalf("idemkit ui after SIGINT: exit %d", code)
	}

	base, stop = serveUI(t, append([]string{"ui", "--listen", "127.0.0.1:0", "--allow-changes", "--actor", "carol", "--scope", "payments"}, flags...)...)
	resp, err = http.PostForm(base+"/record/unstick", url.Values{"scope": {"payments"}, "key": {"order-42"}, "fence": {"1"}, "reason": {"worker gone"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("unstick through the UI: %d", resp.StatusCode)
	}
	r := idemkit(t, append([]string{"inspect", "order-42", "--scope", "payments"}, flags...)...)
	expect(t, r, 0, "retry", "unstick by carol: worker gone")
	if code := stop(); code != 0 {
		t.Fatalf("idemkit ui after SIGINT: exit %d", code)
	}

	expect(t, idemkit(t, append([]string{"ui", "--allow-changes", "--listen", "0.0.0.0:0", "--scope", "payments"}, flags...)...), 2, "loopback")
	expect(t, idemkit(t, append([]string{"ui", "--allow-changes", "--listen", "127.0.0.1:0"}, flags...)...), 2, "--scope")
	expect(t, idemkit(t, append([]string{"ui", "--plans", "/nonexistent/dir"}, flags...)...), 2, "--plans")
}

var servingRE = regexp.MustCompile(`on (http://[0-9.:]+)/ `)

// serveUI starts the binary with args and returns the UI's base URL and a
// function that stops it with SIGINT and returns its exit code.
func serveUI(t *testing.T, args ...string) (string, func() int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(hermetic(os.Environ()), "USER=tester")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(stderr)
	var base string
	for base == "" && lines.Scan() {
		if m := servingRE.FindStringSubmatch(lines.Text()); m != nil {
			base = m[1]
		}
	}
	if base == "" {
		t.Fatalf("idemkit ui did not say where it serves")
	}
	drained := make(chan struct{})
	go func() { defer close(drained); _, _ = io.Copy(io.Discard, stderr) }()
	return base, func() int {
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		<-drained // the pipe ends when the process exits
		_ = cmd.Wait()
		return cmd.ProcessState.ExitCode()
	}
}

func httpGet(t *testing.T, u string, want int) string {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("GET %s: %d, want %d\n%s", u, resp.StatusCode, want, b)
	}
	return string(b)
}
