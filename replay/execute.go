package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	// Read counts the messages read; Skipped those before the checkpoint it resumed from.
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
// ExecuteBatch stores any handler's.
type Handler[T any] func(ctx context.Context, m Message) (T, error)

type readResult struct {
	msgs []Message
	err  error
}

// Execute drives src's messages through fn, idempotently: each batch goes through
// consumer.ExecuteBatch, so a message whose key is completed is a DUPLICATE and not
// run, and one whose key is new runs once however often the replay is interrupted
// and resumed. The next batch is read while one executes. When ctx is cancelled,
// the running batch's handlers that have not started are not run; Execute saves the
// checkpoint and returns ctx's error with the report so far. It stops the same way
// after a batch the store did not answer for, with an error matching
// consumer.ErrStoreUnavailable. It refuses a store on consumer.DefaultScope (an
// error matching consumer.ErrDefaultScope and ErrConfig) before reading src.
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
	e := &executor[T]{c: c, store: store, s: store.Settings(), fn: fn, start: c.now(), blocked: map[string]bool{}, ack: ack}
	e.rep.Source = sourceName(src)
	e.rep.Counts = map[Verdict]int{}
	e.rep.Checkpoint = Checkpoint{Source: e.rep.Source, Next: map[string]int64{}}
	if c.checkpoint != nil {
		cp, err := c.checkpoint.Load()
		if err != nil {
			return e.rep, err
		}
		if cp.Source != "" && cp.Source != e.rep.Source {
			return e.rep, configError("the checkpoint is of %q, not of %q: give another checkpoint file", cp.Source, e.rep.Source)
		}
		maps.Copy(e.rep.Checkpoint.Next, cp.Next)
	}

	rctx, stop := context.WithCancel(ctx)
	batches := make(chan readResult, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // reads ahead while a batch executes
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

	var runErr error
	for rr := range batches {
		if err := e.batch(ctx, rr.msgs); err != nil {
			runErr = err
			break
		}
		if errors.Is(rr.err, io.EOF) {
			break
		}
		if rr.err != nil {
			runErr = fmt.Errorf("replay: read %s: %w", e.rep.Source, rr.err)
			break
		}
		if err := ctx.Err(); err != nil {
			runErr = err
			break
		}
	}
	if runErr == nil {
		runErr = ctx.Err()
	}
	if err := e.save(true); err != nil && runErr == nil {
		runErr = err
	}
	e.progress(true)
	return e.rep, runErr
}

type executor[T any] struct {
	c       config
	store   consumer.Store
	s       consumer.Settings
	fn      Handler[T]
	start   time.Time
	rep     Report
	blocked map[string]bool // partitions the checkpoint may no longer pass in this run
	ack     Acknowledger    // nil unless the source is a queue
	saved   time.Time
	dirty   bool
}

// batch executes one batch of messages and moves the checkpoint past its settled
// prefix. It fails, after recording what settled, when the store did not answer
// for one of the batch's messages: the rest of the source would only meet the
// same outage.
func (e *executor[T]) batch(ctx context.Context, all []Message) error {
	var msgs []Message
	for _, m := range all {
		e.rep.Read++
		if e.rep.Checkpoint.Done(m) {
			e.rep.Skipped++
			continue
		}
		msgs = append(msgs, m)
	}
	if len(msgs) == 0 {
		return nil
	}
	if err := e.pace(ctx); err != nil {
		return err
	}
	verdicts := make([]Verdict, len(msgs))
	errs := make([]string, len(msgs))
	var items []consumer.BatchItem
	var at []int
	for i, m := range msgs {
		why := invalid(m)
		switch {
		case why != "":
			verdicts[i], errs[i] = Invalid, why
		case e.c.maxReplays > 0 && replays(m) >= e.c.maxReplays:
			verdicts[i] = Quarantine
			errs[i] = fmt.Sprintf("its %s header, %d, reached the loop guard's limit of %d (WithMaxReplays)", HeaderReplayCount, replays(m), e.c.maxReplays)
			if e.c.quarantine != nil {
				if err := e.c.quarantine(m); err != nil {
					return fmt.Errorf("replay: quarantine %q: %w", string(m.Key), err)
				}
			}
		default:
			p, err := e.c.payload(m)
			if err != nil {
				verdicts[i], errs[i] = Invalid, "canonical form: "+err.Error()
				continue
			}
			items, at = append(items, consumer.BatchItem{Key: m.Key, Payload: p}), append(at, i)
		}
	}
	if err := e.checkRetention(ctx, msgs, at); err != nil {
		return err
	}
	var outage error // the first error of a store that did not answer
	if len(items) > 0 {
		h := func(hctx context.Context, j int, _ consumer.BatchItem) (T, error) {
			v, err := e.fn(hctx, msgs[at[j]])
			if err != nil && ctx.Err() != nil {
				// Cut short by the replay's own stop: the claim is given back and the
				// attempt not counted.
				err = consumer.Abandon(err)
			}
			return v, err
		}
		for j, r := range runBatch(ctx, e.store, items, h, e.c.concurrency) {
			verdicts[at[j]] = outcomeVerdict(r.Outcome, r.Err)
			if r.Err != nil {
				errs[at[j]] = r.Err.Error()
			}
			if outage == nil && errors.Is(r.Err, consumer.ErrStoreUnavailable) {
				outage = r.Err
			}
		}
	}
	for i, m := range msgs {
		v := verdicts[i]
		e.rep.Counts[v]++
		settled := v != Error && v != InProgress
		if v != Ran && v != Duplicate && len(e.rep.Errors) < maxNamed {
			e.rep.Errors = append(e.rep.Errors, itemError(m, v, errs[i]))
		}
		switch {
		case e.blocked[m.Partition]:
		case settled:
			e.rep.Checkpoint.Next[m.Partition] = m.Offset + 1
			e.dirty = true
		default:
			e.blocked[m.Partition] = true
		}
	}
	if err := e.acknowledge(ctx, msgs, verdicts); err != nil {
		return err
	}
	if err := e.save(false); err != nil {
		return err
	}
	e.progress(false)
	if outage != nil {
		return fmt.Errorf("replay: the store did not answer, so the replay stopped after this batch; run it again once the store answers: %w", outage)
	}
	return nil
}

func itemError(m Message, v Verdict, why string) ItemError {
	return ItemError{Key: string(m.Key), Partition: m.Partition, Offset: m.Offset, Verdict: v, Err: why}
}

// acknowledge acks, on a queue source, the messages whose effect is recorded:
// those that ran now and the duplicates. Every other one (failed, in conflict,
// quarantined, in progress, not settled) stays in the queue.
func (e *executor[T]) acknowledge(ctx context.Context, msgs []Message, verdicts []Verdict) error {
	if e.ack == nil {
		return nil
	}
	var done []Message
	for i, v := range verdicts {
		if v == Ran || v == Duplicate {
			done = append(done, msgs[i])
		}
	}
	if len(done) == 0 {
		return nil
	}
	return e.ack.Ack(ctx, done)
}

// outcomeVerdict names an execution's outcome.
func outcomeVerdict(o consumer.Outcome, err error) Verdict {
	switch o {
	case consumer.Success:
		return Ran
	case consumer.Duplicate:
		if consumer.ActionFor(o, err) == consumer.DeadLetter {
			return Failed
		}
		return Duplicate
	case consumer.InProgress:
		return InProgress
	}
	switch {
	case errors.Is(err, consumer.ErrPayloadConflict):
		return Conflict
	case errors.Is(err, consumer.ErrCorruptRecord):
		return Corrupt
	case errors.Is(err, consumer.ErrInvalidKey):
		return Invalid
	case !consumer.Retryable(err):
		return Failed
	}
	return Error
}

// checkRetention refuses a batch that holds messages older than the retention
// whose records are gone, unless accepted.
func (e *executor[T]) checkRetention(ctx context.Context, msgs []Message, at []int) error {
	if e.c.accept {
		return nil
	}
	cutoff := e.c.now().Add(-e.s.Retention)
	var keys []consumer.Key
	var oldest time.Time
	for _, i := range at {
		if t := msgs[i].Time; !t.IsZero() && t.Before(cutoff) {
			keys = append(keys, msgs[i].Key)
			if oldest.IsZero() || t.Before(oldest) {
				oldest = t
			}
		}
	}
	if len(keys) == 0 {
		return nil
	}
	recs, err := peek(ctx, e.store, keys)
	if err != nil {
		return err
	}
	gone := 0
	for _, r := range recs {
		if r.Corrupt == "" && verdictOf(r.Record) == New {
			gone++
		}
	}
	if gone == 0 {
		return nil
	}
	return fmt.Errorf("%w: %d messages of this batch (the oldest from %s) are older than the %v retention and have no record: if they ran before, they run again; accept it with WithAcceptBeyondRetention (idemkit replay --accept-beyond-retention)",
		ErrBeyondRetention, gone, oldest.UTC().Format(time.RFC3339), e.s.Retention)
}

// pace waits as WithRate asks.
func (e *executor[T]) pace(ctx context.Context) error {
	if e.c.rate == 0 {
		return nil
	}
	done := 0
	for v, n := range e.rep.Counts {
		if v != Quarantine && v != Invalid {
			done += n
		}
	}
	due := e.start.Add(time.Duration(float64(done) / e.c.rate * float64(time.Second)))
	wait := time.Until(due)
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// save writes the checkpoint at most once a second, and at the end.
func (e *executor[T]) save(final bool) error {
	if e.c.checkpoint == nil || !e.dirty || (!final && time.Since(e.saved) < time.Second) {
		return nil
	}
	if err := e.c.checkpoint.Save(e.rep.Checkpoint); err != nil {
		return err
	}
	e.saved, e.dirty = time.Now(), false
	return nil
}

func (e *executor[T]) progress(final bool) {
	e.rep.Elapsed = time.Since(e.start)
	e.rep.Final = final
	done := e.rep.Read - e.rep.Skipped
	if s := e.rep.Elapsed.Seconds(); s > 0 {
		e.rep.Rate = float64(done) / s
	}
	if e.c.progress != nil {
		p := e.rep.Progress
		p.Counts = maps.Clone(e.rep.Counts)
		e.c.progress(p)
	}
}
