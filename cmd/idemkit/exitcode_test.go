package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	redisstore "github.com/idemkit/idemkit/store/redis"
)

// lines writes a JSON Lines file of the given lines into dir.
func lines(t *testing.T, dir, name string, ls ...string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(strings.Join(ls, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A cron job can tell from replay's exit code how the run ended: 0 when every
// message ended RAN or DUPLICATE, 6 when some are to retry, 7 when some failed for
// good, conflict, are invalid or quarantined (whatever else happened), 4 when the
// retention guard stops it, 2 for a bad command line, 5 when the store does not
// answer. INVALID lines are named in the
// plan, the dry run and the run, by line number and why.
func TestReplayExitCodes(t *testing.T) {
	addr, prefix := testenv.RedisAddr(t), testenv.Prefix(t)
	store, err := redisstore.NewStore(testenv.Redis(t), consumer.WithPrefix(prefix), consumer.WithScope("payments"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	consumer.ExecuteIdempotently(ctx, store, "done", []byte("x"), func(context.Context) (int, error) { return 1, nil })
	consumer.ExecuteIdempotently(ctx, store, "other", []byte("the payload the service saw"), func(context.Context) (int, error) { return 1, nil })
	dir := t.TempDir()
	ran := filepath.Join(dir, "ran")
	// The command fails for good on keys starting with "bad", asks to retry later on
	// those starting with "later", and succeeds on the others.
	command := `printf '%s\n' "$IDEMKIT_KEY" >> ` + ran + `; case "$IDEMKIT_KEY" in bad*) echo declined >&2; exit 3;; later*) exit 75;; esac`
	global := []string{"--redis", addr, "--prefix", prefix, "--scope", "payments"}
	replay := func(file string, extra ...string) result {
		t.Helper()
		return squeeze(idemkit(t, append(append(append([]string{}, global...), "replay", "--jsonl", file, "--exec", command, "--concurrency", "1"), extra...)...))
	}

	settled := lines(t, dir, "settled.jsonl", `{"key":"done","payload":"x"}`, `{"key":"new-1","payload":"x"}`)
	expect(t, replay(settled, "--execute"), exitOK, "RAN 1", "DUPLICATE 1", "every message settled")

	broken := lines(t, dir, "broken.jsonl",
		`{"key":"new-2","payload":"x"}`,
		`{"payload":"no key"}`,
		`not json`,
		`{"key":"other","payload":"another payload"}`,
		`{"key":"bad-1","payload":"x"}`,
	)
	invalid := []string{`INVALID line 2: no "key"`, "INVALID line 3: not a JSON object"}
	expect(t, squeeze(idemkit(t, append(global, "plan", "--jsonl", broken)...)), exitOK,
		append(invalid, "INVALID 2", "2 messages are INVALID and will not run")...)
	expect(t, replay(broken), exitOK, append(invalid, "dry run: nothing was run")...)
	r := replay(broken, "--execute")
	expect(t, r, exitUnresolved, append(invalid, "RAN 1", "FAILED 1", "CONFLICT 1", "INVALID 2",
		"FAILED line 5: bad-1: ", "exit 3: declined", "CONFLICT line 4: other",
		"4 messages will not settle by running again (FAILED, CONFLICT, CORRUPT, INVALID or QUARANTINE)")...)
	// The JSON report says the same to a script.
	rj := idemkit(t, append(append([]string{}, global...), "replay", "--jsonl", broken, "--exec", command, "--execute", "--json")...)
	var rep struct {
		Counts map[string]int
		Errors []struct {
			Offset  int64
			Verdict string
			Error   string
		}
	}
	if rj.code != exitUnresolved || json.Unmarshal([]byte(rj.stdout), &rep) != nil || rep.Counts["INVALID"] != 2 || rep.Counts["DUPLICATE"] != 1 ||
		len(rep.Errors) != 4 || rep.Errors[0].Offset != 2 || rep.Errors[0].Error != `no "key"` {
		t.Fatalf("replay --json: %+v", rj)
	}

	retry := lines(t, dir, "retry.jsonl", `{"key":"later-1","payload":"x"}`, `{"key":"new-3","payload":"x"}`)
	expect(t, replay(retry, "--execute"), exitUnsettled, "RAN 1", "ERROR 1", "ERROR line 1: later-1: ", "exit 75 (retry later)",
		"1 messages did not settle")
	both := lines(t, dir, "both.jsonl", `{"key":"later-2","payload":"x"}`, `{"key":"bad-2","payload":"x"}`)
	expect(t, replay(both, "--execute"), exitUnresolved, "ERROR 1", "FAILED 1")
	quarantined := lines(t, dir, "loop.jsonl", `{"key":"new-4","payload":"x","headers":{"idemkit-replay-count":"5"}}`)
	expect(t, replay(quarantined, "--execute"), exitUnresolved, "QUARANTINE 1", "QUARANTINE line 1: new-4: its idemkit-replay-count header, 5")

	old := lines(t, dir, "old.jsonl", `{"key":"new-5","payload":"x","time":"`+time.Now().Add(-72*time.Hour).UTC().Format(time.RFC3339)+`"}`)
	r = replay(old, "--execute")
	expect(t, r, exitRefused, "older than the 24h0m0s retention")
	if strings.Contains(r.stdout, "every message settled") {
		t.Fatalf("a replay the retention guard stopped says every message settled:\n%s", r.stdout)
	}
	expect(t, replay(settled, "--execute", "--concurrency", "0"), exitUsage, "--concurrency")
	expect(t, squeeze(idemkit(t, "--redis", "127.0.0.1:1", "--timeout", "300ms", "--prefix", prefix, "--scope", "payments",
		"replay", "--jsonl", retry, "--exec", "true", "--execute")), exitUnreachable, "the Redis server at 127.0.0.1:1 did not answer")

	b, _ := os.ReadFile(ran)
	if got := strings.Join(strings.Fields(string(b)), " "); got != "new-1 new-2 bad-1 later-1 new-3 later-2 bad-2" {
		t.Fatalf("the command ran for: %s", got)
	}
}

// SIGINT (or SIGTERM) stops a replay after its running command, which is told to
// stop too (its whole process group): the run exits 8 at once, saying it was
// interrupted, without counting the interrupted attempt; run again, it resumes
// from its checkpoint and exits 0.
func TestReplayInterruptedExitCode(t *testing.T) {
	addr, prefix := testenv.RedisAddr(t), testenv.Prefix(t)
	dir := t.TempDir()
	ran, started, gate := filepath.Join(dir, "ran"), filepath.Join(dir, "started"), filepath.Join(dir, "gate")
	file := lines(t, dir, "m.jsonl", `{"key":"k1","payload":"x"}`, `{"key":"k2","payload":"x"}`, `{"key":"k3","payload":"x"}`)
	// On k2, until the gate file exists, the command starts a child that outlives
	// any wait a test would make, and waits for it.
	command := fmt.Sprintf(`printf '%%s\n' "$IDEMKIT_KEY" >> %s; if [ "$IDEMKIT_KEY" = k2 ] && [ ! -e %s ]; then touch %s; sleep 300; fi`, ran, gate, started)
	args := []string{"--redis", addr, "--prefix", prefix, "--scope", "payments", "replay", "--jsonl", file, "--exec", command,
		"--execute", "--concurrency", "1", "--batch-size", "1", "--checkpoint", filepath.Join(dir, "cp.json")}

	cmd := exec.Command(bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	testenv.Eventually(t, 60*time.Second, "the command runs k2", func() bool {
		_, err := os.Stat(started)
		return err == nil
	})
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	var err error
	select {
	case err = <-exited:
	case <-deadline.C:
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("the interrupted replay did not exit within a minute of SIGINT:\n%s", out.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitInterrupted || !strings.Contains(out.String(), "interrupted") ||
		!strings.Contains(out.String(), "run it again") {
		t.Fatalf("interrupted replay: %v\n%s", err, out.String())
	}
	r := idemkit(t, "--redis", addr, "--prefix", prefix, "--scope", "payments", "inspect", "k2", "--json")
	var rec map[string]any
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rec) != nil || rec["state"] == "failed" || rec["attempts"] != float64(0) {
		t.Fatalf("k2 after the interruption: %+v", r)
	}

	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	expect(t, squeeze(idemkit(t, args...)), exitOK, "RAN 2", "1 skipped")
	b, _ := os.ReadFile(ran)
	if got := strings.Join(strings.Fields(string(b)), " "); got != "k1 k2 k2 k3" {
		t.Fatalf("the command ran for: %s", got)
	}
}

// The exit codes are stable: --help and the package doc list each one as the
// code has it.
func TestExitCodesDocumented(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	flat := func(s string) string {
		s = regexp.MustCompile(`(?m)^//\s?`).ReplaceAllString(s, "")
		return strings.Join(strings.Fields(s), " ")
	}
	help := idemkit(t, "--help")
	replayHelp := idemkit(t, "replay", "--help")
	for _, c := range exitCodes {
		line := fmt.Sprintf("%d %s", c.code, c.means)
		for where, text := range map[string]string{"the package doc": string(doc), "--help": help.stdout, "replay --help": replayHelp.stdout} {
			if !strings.Contains(flat(text), line) {
				t.Fatalf("%s lacks exit code %q", where, line)
			}
		}
	}
	if len(exitCodes) != exitInterrupted+1 {
		t.Fatalf("exitCodes lists %d codes", len(exitCodes))
	}
}
