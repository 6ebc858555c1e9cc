package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/replay"
)

// stopGrace is how long a command told to stop (SIGTERM to its process group)
// has before it is killed (SIGKILL).
const stopGrace = 5 * time.Second

// execHandler runs command once per message. When the replay stops (SIGINT,
// SIGTERM) a running command is stopped with every process it started, so that
// none of them acts on the message after the replay gave it back.
func execHandler(command string) replay.Handler[string] {
	return func(ctx context.Context, m replay.Message) (string, error) {
		cmd := exec.CommandContext(ctx, "sh", "-c", command)
		cmd.Stdin = bytes.NewReader(m.Payload)
		cmd.Env = append(os.Environ(), "IDEMKIT_KEY="+string(m.Key), "IDEMKIT_PARTITION="+m.Partition,
			"IDEMKIT_OFFSET="+strconv.FormatInt(m.Offset, 10))
		var stdout, stderr limited
		stdout.max, stderr.max = 64<<10, 4<<10
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		after := stopGroup(cmd, stopGrace)
		err := cmd.Run()
		after()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return stdout.String(), nil
		case ctx.Err() != nil:
			return "", fmt.Errorf("--exec command stopped (%v): %w", err, context.Cause(ctx))
		case errors.As(err, &ee) && ee.ExitCode() == 75:
			return "", fmt.Errorf("--exec command: exit 75 (retry later): %s", strings.TrimSpace(stderr.String()))
		case errors.As(err, &ee) && ee.ExitCode() > 0:
			return "", consumer.Permanent(fmt.Errorf("--exec command: exit %d: %s", ee.ExitCode(), strings.TrimSpace(stderr.String())))
		}
		return "", fmt.Errorf("--exec command: %w", err)
	}
}

// limited keeps the first max bytes written to it.
type limited struct {
	bytes.Buffer
	max int
}

func (l *limited) Write(p []byte) (int, error) {
	if room := l.max - l.Len(); room > 0 {
		l.Buffer.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

var _ io.Writer = (*limited)(nil)
