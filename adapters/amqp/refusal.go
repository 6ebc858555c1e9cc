package amqp

import (
	"errors"
	"fmt"
	"strings"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// RefusedError: the broker refused the worker for a reason reconnecting cannot
// cure: its user name or password, its vhost, or its permissions. Run ends with
// it, and Check returns it.
type RefusedError struct {
	Code   int    // the AMQP reply code: 402 INVALID_PATH, 403 ACCESS_REFUSED or 530 NOT_ALLOWED
	Reason string // the broker's words
	Fix    string // what to change
	Err    error  // the *amqp091.Error

	// guessed: the client library's verdict when the broker dropped the login
	// without a word (it cannot tell bad credentials from a connection lost then).
	guessed bool
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("amqp: the broker refused the worker (%d %s): %s", e.Code, e.Reason, e.Fix)
}

func (e *RefusedError) Unwrap() error { return e.Err }

// refusal returns the *RefusedError err is, or carries, or nil when err is one a
// reconnection may cure. atLogin: err ended the dial (the login and the vhost's
// connection.open), where 530 NOT_ALLOWED refuses the vhost; later it names a
// limit of the connection (channel_max), which a new connection resets.
func (w *Worker[V, T]) refusal(err error, atLogin bool) *RefusedError {
	var done *RefusedError
	switch {
	case errors.As(err, &done):
		return done
	case errors.Is(err, errDial): // judged at the dial: not a refusal
		return nil
	}
	var aerr *amqp091.Error
	if !errors.As(err, &aerr) {
		return nil
	}
	r := &RefusedError{Code: aerr.Code, Reason: aerr.Reason, Err: aerr,
		guessed: !aerr.Server && (aerr == amqp091.ErrCredentials || aerr == amqp091.ErrVhost)}
	reason := strings.ToLower(aerr.Reason)
	switch {
	case aerr == amqp091.ErrSASL:
		r.Fix = "the broker offers none of the login mechanisms the client speaks (PLAIN, AMQPLAIN): enable one on the broker"
	case aerr == amqp091.ErrVhost:
		r.Fix = fmt.Sprintf("give user %q access to vhost %q on the broker (rabbitmqctl set_permissions), or fix the broker URL", w.user, w.vhost)
	case aerr.Code == amqp091.AccessRefused && atLogin:
		r.Fix = fmt.Sprintf("check the user name (%q) and the password in the broker URL, or create that user on the broker "+
			"(RabbitMQ's guest user may log in from localhost only)", w.user)
	case aerr.Code == amqp091.AccessRefused:
		r.Fix = fmt.Sprintf("give user %q configure, write and read permissions on vhost %q for the worker's queues (%s, its retry queues and %s)",
			w.user, w.vhost, w.topo.Queue, w.topo.DeadLetterQueue)
	case aerr.Code == amqp091.InvalidPath:
		r.Fix = fmt.Sprintf("fix the vhost (%q) in the broker URL", w.vhost)
	case aerr.Code == amqp091.NotAllowed && atLogin && !strings.Contains(reason, "limit") && !strings.Contains(reason, " down"):
		// A connection limit that is reached, or a vhost that is restarting, is
		// waited out; a vhost that does not exist or is not this user's is not.
		r.Fix = fmt.Sprintf("create vhost %q on the broker and give user %q access to it, or fix the vhost in the broker URL", w.vhost, w.user)
	default:
		return nil
	}
	return r
}
