package replay

import (
	"context"
	"errors"
	"maps"
	"sync"
	"time"

	"github.com/idemkit/idemkit/consumer"
)

// Ran is the verdict of a message whose handler ran now and succeeded.
const Ran Verdict = "RAN"

// ErrBeyondRetention: the replay reached messages older than the store's
// retention that have no record; see WithAcceptBeyondRetention.
var ErrBeyondRetention = errors.New("replay: messages older than the store's retention have no record and would run again")

// Progress is how far a replay has got.
type Progress struct {
	Source string `json:"source"`
	// Read counts the messages read, of the batches counted so far (a batch is
	// counted once each of its messages has its verdict); Skipped those before the
	// checkpoint it resumed from.
	Read    int `json:"read"`
	Skipped int `json:"skipped"`
	// Counts maps each verdict to its number of messages: RAN (the handler ran and
	// succeeded), DUPLICATE, FAILED, IN_PROGRESS, CONFLICT, CORRUPT, INVALID,
	// QUARANTINE, ERROR (retryable: the checkpoint stays before it).
	Counts  map[Verdict]int `json:"counts"`
	Elapsed time.Duration   `json:"elapsed_ns"`
	// Rate is messages executed per second so far.
	Rate float64 `json:"rate"`
	// Final is set on the last call.
	Final bool `json:"final"`
}

// Report is what Execute did.
type Report struct {
	Progress
	// Checkpoint is the last one saved (or that would have been, without WithCheckpoint).
	Checkpoint Checkpoint `json:"checkpoint"`
	// Errors are the first 20 messages that did not end RAN or DUPLICATE, with
	// their verdict and why: those that did not settle (ERROR, IN_PROGRESS) and those
	// that a later run will not settle either (FAILED, CONFLICT, CORRUPT, INVALID,
	// QUARANTINE).
	Errors []ItemError `json:"errors,omitempty"`
}

// maxNamed is how many messages a report names (Report.Errors, PlanReport.Invalid).
const maxNamed = 20

// ItemError is one message that did not end RAN or DUPLICATE: where it is in its
// source (Partition and Offset, as Message has them: a JSONL file's "" and line
// number), its verdict and why.
type ItemError struct {
	Key       string  `json:"key"`
	Partition string  `json:"partition"`
	Offset    int64   `json:"offset"`
	Verdict   Verdict `json:"verdict"`
	Err       string  `json:"error"`
}

// Handler handles one replayed message; its result is stored for duplicates as
// idemkit stores any handler's.
type Handler[T any] func(ctx context.Context, m Message) (T, error)

// Execute drives src's messages through fn, idempotently, on idemkit's execution
// engine (a consumer.Pipeline): a message whose key is completed is a DUPLICATE and
// not run, and one whose key is new runs once however often the replay is
// interrupted and resumed. Messages stream through the engine: up to a batch of
// them (WithBatchSize) are between hand-over and result at any time, WithConcurrency
// handlers run at once, and the next batch is read while messages run. When ctx is
// cancelled, the messages whose handlers have not started are not run; Execute saves
// the checkpoint and returns ctx's error with the report so far. When the store does
// not answer for a message, it takes no further batch, lets the batches it took run
// out, and returns an error matching consumer.ErrStoreUnavailable. It
// refuses a store on consumer.DefaultScope (an error matching
// consumer.ErrDefaultScope and ErrConfig) before reading src.
func Execute[T any](ctx context.Context, store consumer.Store, src Source, fn Handler[T], opts ...Option) (Report, error) {
	c, err := newConfig(opts)
	if err != nil {
		return Report{}, err
	}
	if store == nil || src == nil || fn == nil {
		return Report{}, configError("nil store, source or handler")
	}
	if err := checkScope(store.Settings()); err != nil {
		return Report{}, err
	}
	ack, acks := src.(Acknowledger)
	if acks && c.checkpoint != nil {
		return Report{}, configError("%s is its own checkpoint (what is done is acked and leaves it): drop WithCheckpoint", sourceName(src))
	}
	e := &executor[T]{c: c, store: store, s: store.Settings(), fn: fn, start: c.now(), blocked: map[string]bool{}, ack: ack,
		wake: make(chan struct{}, 1), chunk: chunk(c.batch, c.concurrency)}
	e.rep.Source = sourceName(src)
	e.rep.Counts = map[Verdict]int{}
	e.rep.Checkpoint = Checkpoint{Source: e.rep.Source, Next: map[string]int64{}}
	e.resume = Checkpoint{Source: e.rep.Source, Next: map[string]int64{}}
	if c.checkpoint != nil {
		cp, err := c.checkpoint.Load()
		if err != nil {
			return e.rep, err
		}
		if cp.Source != "" && cp.Source != e.rep.Source {
			return e.rep, configError("the checkpoint is of %q, not of %q: give another checkpoint file", cp.Source, e.rep.Source)
		}
		maps.Copy(e.rep.Checkpoint.Next, cp.Next)
		maps.Copy(e.resume.Next, cp.Next)
	}
	if e.eng, err = newEngine[T](ctx, store, c); err != nil {
		return e.rep, err
	}
	defer func() { _ = e.eng.stop(context.Background()) }() // also if a callback panics

	rctx, stop := context.WithCancel(ctx)
	batches := make(chan readResult, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // reads ahead while messages run
		defer wg.Done()
		defer close(batches)
		for {
			msgs, err := src.Read(rctx, c.batch)
			select {
			case batches <- readResult{msgs, err}:
			case <-rctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		stop()
		for range batches { // let the reader see the stop
		}
		wg.Wait()
	}()

	e.run(ctx, batches)
	_ = e.eng.stop(context.Background()) // every message has its result: nothing is left to wait for
	e.timers.Wait()
	runErr := e.err
	if runErr == nil {
		runErr = ctx.Err()
	}
	if err := e.save(true); err != nil && runErr == nil {
		runErr = err
	}
	e.progress(true)
	return e.rep, runErr
}
