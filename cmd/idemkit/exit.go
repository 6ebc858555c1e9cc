package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"

	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/replay"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Exit codes. They are stable: scripts and cron jobs rely on them. exitCodes says
// what each means, for --help; the package doc lists the same.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitNotFound    = 3
	exitRefused     = 4
	exitUnreachable = 5
	exitUnsettled   = 6
	exitUnresolved  = 7
	exitInterrupted = 8
)

// exitCodes lists every exit code with what it means, in order.
var exitCodes = []struct {
	code  int
	means string
}{
	{exitOK, "done; for replay --execute: every message ended RAN or DUPLICATE"},
	{exitFailure, "failed for another reason (the message says why)"},
	{exitUsage, "bad usage or configuration: an unknown flag, a missing argument, a value out of range, or a command that changes records given no --scope or the default one"},
	{exitNotFound, "no record at the key"},
	{exitRefused, "refused: the record's state or fence does not allow the change; a bulk --execute N whose count differs from the preview's or exceeds --max, or that left records alone because they moved on; or the replay's retention guard stopped it (--accept-beyond-retention)"},
	{exitUnreachable, "the store (Redis, PostgreSQL, DynamoDB), Kafka or RabbitMQ did not answer (a replay stops after the first batch the store did not answer)"},
	{exitUnsettled, "a replay finished with messages that did not settle (ERROR: retryable errors; IN_PROGRESS: held elsewhere) and none of code 7's: run it again to retry them"},
	{exitUnresolved, "a replay finished with messages that running it again will not settle: FAILED (failed for good, their dead letters stand), CONFLICT, CORRUPT, INVALID or QUARANTINE; the output names them"},
	{exitInterrupted, "interrupted by SIGINT or SIGTERM before it finished (a replay stops after its running commands and saves its checkpoint: run it again to resume)"},
}

// exitCodeHelp is the exit code list as --help shows it, wrapped at 80 columns.
func exitCodeHelp() string {
	var b strings.Builder
	b.WriteString("Exit codes:\n")
	for _, c := range exitCodes {
		line := fmt.Sprintf("  %d ", c.code)
		for _, w := range strings.Fields(c.means) {
			if len(line)+1+len(w) > 80 {
				b.WriteString(line + "\n")
				line = "    "
			}
			line += " " + w
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// usageError is a bad flag, argument or value.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// unsettledError says a replay finished with messages to retry, and none that a
// retry will not settle.
type unsettledError struct{ n int }

func (e unsettledError) Error() string {
	return fmt.Sprintf("%d messages did not settle (retryable errors or in progress elsewhere): run the replay again to retry them", e.n)
}

// unresolvedError says a replay finished with messages that running it again
// will not settle.
type unresolvedError struct{ n int }

func (e unresolvedError) Error() string {
	return fmt.Sprintf("%d messages will not settle by running again (FAILED, CONFLICT, CORRUPT, INVALID or QUARANTINE): see the messages named above", e.n)
}

// interruptedError says a signal stopped the command before it finished.
type interruptedError struct {
	err  error
	hint string
}

func (e interruptedError) Error() string {
	return fmt.Sprintf("interrupted (SIGINT or SIGTERM) before it finished%s: %v", e.hint, e.err)
}
func (e interruptedError) Unwrap() error { return e.err }

// exitCode maps an error to the documented exit code.
func exitCode(err error) int {
	var ue usageError
	var ne net.Error
	var oe *net.OpError
	var un unsettledError
	var ur unresolvedError
	var ie interruptedError
	var re refusedError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ie):
		return exitInterrupted
	case errors.As(err, &ue), errors.Is(err, admin.ErrInvalid), errors.Is(err, replay.ErrConfig),
		errors.Is(err, consumer.ErrInvalidConfig), errors.Is(err, consumer.ErrInvalidKey), errors.Is(err, consumer.ErrDefaultScope):
		return exitUsage
	case errors.Is(err, admin.ErrNotFound):
		return exitNotFound
	case errors.Is(err, admin.ErrWrongState), errors.Is(err, admin.ErrFenceMoved), errors.Is(err, replay.ErrBeyondRetention),
		errors.Is(err, admin.ErrTooMany), errors.As(err, &re):
		return exitRefused
	case errors.As(err, &ur):
		return exitUnresolved
	case errors.As(err, &un):
		return exitUnsettled
	case errors.Is(err, consumer.ErrStoreUnavailable), errors.Is(err, syscall.ECONNREFUSED), errors.As(err, &oe),
		errors.As(err, &ne), errors.Is(err, kgo.ErrClientClosed), errors.Is(err, context.DeadlineExceeded):
		return exitUnreachable
	}
	return exitFailure
}

// replayExit is how a replay that ran to its end exits: nil when every message
// ended RAN or DUPLICATE; an unresolvedError when any ended otherwise but for
// ERROR and IN_PROGRESS (running again would not settle them); an
// unsettledError when the rest are only those.
func replayExit(counts map[replay.Verdict]int) error {
	retry, unresolved := 0, 0
	for v, n := range counts {
		switch v {
		case replay.Ran, replay.Duplicate:
		case replay.Error, replay.InProgress:
			retry += n
		default:
			unresolved += n
		}
	}
	switch {
	case unresolved > 0:
		return unresolvedError{unresolved}
	case retry > 0:
		return unsettledError{retry}
	}
	return nil
}
