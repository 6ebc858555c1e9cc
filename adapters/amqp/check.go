package amqp

import (
	"context"
	"errors"
	"fmt"
)

// ErrNotConsuming is matched by every error Ready returns.
var ErrNotConsuming = errors.New("amqp: the worker is not consuming")

var (
	errNotStarted = errors.New("not started (call Run)")
	errStopped    = errors.New("stopped")
)

// Check verifies, for start-up, that the worker can run: it dials the broker at
// the worker's URL (the address, the user name and password, the vhost), then
// declares the topology (WithDeclare, the default), which also proves the user may
// configure its queues, or else checks that each of its queues exists. It returns
// nil; a *RefusedError that says what to fix (Run would end with it); a
// *TopologyConflictError; or the error of a broker that does not answer (Run would
// retry it). It checks neither the store (see the store's own Check) nor the
// permission to read and write, which only consuming and publishing prove. It opens
// and closes a connection of its own, bounded by ctx's deadline and 5s.
func (w *Worker[V, T]) Check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var cork *corkConn
	conn, err := w.connect(ctx, true, &cork)
	if err != nil {
		if r := w.refusal(err, false); r != nil {
			return r
		}
		return err
	}
	return conn.Close()
}

// Ready reports whether Run is consuming, for readiness probes: nil while a
// session is up (connected, topology declared, consumer registered); otherwise an
// error matching ErrNotConsuming that says why: Run not called yet, a lost session
// being reconnected (wrapping the error that ended it), Run ended by a refusal or
// a topology conflict (wrapping it), or Run returned after its context ended.
func (w *Worker[V, T]) Ready() error {
	if err := w.ready.Load(); err != nil {
		return *err
	}
	return nil
}

func (w *Worker[V, T]) notReady(why error) {
	err := fmt.Errorf("%w: %w", ErrNotConsuming, why)
	w.ready.Store(&err)
}
