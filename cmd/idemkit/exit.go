package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/replay"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Exit codes (listed in the package doc).
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitNotFound    = 3
	exitRefused     = 4
	exitUnreachable = 5
	exitUnsettled   = 6
)

// usageError is a bad flag, argument or value.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// unsettledError says a replay finished with messages that did not settle.
type unsettledError struct{ n int }

func (e unsettledError) Error() string {
	return fmt.Sprintf("%d messages did not settle (retryable errors or in progress elsewhere): run the replay again to retry them", e.n)
}

// exitCode maps an error to the documented exit code.
func exitCode(err error) int {
	var ue usageError
	var ne net.Error
	var oe *net.OpError
	var un unsettledError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue), errors.Is(err, admin.ErrInvalid), errors.Is(err, replay.ErrConfig),
		errors.Is(err, consumer.ErrInvalidConfig), errors.Is(err, consumer.ErrInvalidKey), errors.Is(err, consumer.ErrDefaultScope):
		return exitUsage
	case errors.Is(err, admin.ErrNotFound):
		return exitNotFound
	case errors.Is(err, admin.ErrWrongState), errors.Is(err, admin.ErrFenceMoved), errors.Is(err, replay.ErrBeyondRetention):
		return exitRefused
	case errors.As(err, &un):
		return exitUnsettled
	case errors.Is(err, consumer.ErrStoreUnavailable), errors.Is(err, syscall.ECONNREFUSED), errors.As(err, &oe),
		errors.As(err, &ne), errors.Is(err, kgo.ErrClientClosed), errors.Is(err, context.DeadlineExceeded):
		return exitUnreachable
	}
	return exitFailure
}
