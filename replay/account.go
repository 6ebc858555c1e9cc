package replay

import (
	"context"
	"maps"
	"time"
)

// count counts, in source order, the messages whose results have arrived, up to the
// first that has none yet: their verdicts, the messages the report names, and the
// checkpoint. After each batch counted in full it acks a queue source's settled
// messages, saves the checkpoint (at most once a second) and reports progress.
func (e *executor[T]) count(ctx context.Context) {
	for len(e.queue) > 0 {
		b := e.queue[0]
		e.mu.Lock() // results are set under mu
		n := b.counted
		for n < len(b.slots) && b.slots[n].settled {
			n++
		}
		e.mu.Unlock()
		for ; b.counted < n; b.counted++ {
			e.countOne(&b.slots[b.counted])
		}
		if b.counted < len(b.slots) {
			return
		}
		e.queue[0] = nil
		e.queue = e.queue[1:]
		e.tracked -= len(b.slots)
		e.batchDone(ctx, b)
	}
}

// countOne counts one settled message and moves its partition's checkpoint past it,
// unless an earlier message of the partition did not settle in this run.
func (e *executor[T]) countOne(sl *slot) {
	v, m := sl.verdict, sl.m
	e.rep.Counts[v]++
	if v != Ran && v != Duplicate && len(e.rep.Errors) < maxNamed {
		e.rep.Errors = append(e.rep.Errors, itemError(m, v, sl.why))
	}
	switch {
	case e.blocked[m.Partition]:
	case v != Error && v != InProgress:
		e.rep.Checkpoint.Next[m.Partition] = m.Offset + 1
		e.dirty = true
	default:
		e.blocked[m.Partition] = true
	}
}

// batchDone ends a batch whose every message is counted.
func (e *executor[T]) batchDone(ctx context.Context, b *batch) {
	e.rep.Read += b.read
	e.rep.Skipped += b.skipped
	if len(b.slots) == 0 {
		return
	}
	if err := e.acknowledge(ctx, b); err != nil {
		e.fail(err)
	}
	if err := e.save(false); err != nil {
		e.fail(err)
	}
	e.progress(false)
}

func itemError(m Message, v Verdict, why string) ItemError {
	return ItemError{Key: string(m.Key), Partition: m.Partition, Offset: m.Offset, Verdict: v, Err: why}
}

// acknowledge acks, on a queue source, the messages whose effect is recorded:
// those that ran now and the duplicates. Every other one (failed, in conflict,
// quarantined, in progress, not settled) stays in the queue.
func (e *executor[T]) acknowledge(ctx context.Context, b *batch) error {
	if e.ack == nil {
		return nil
	}
	var done []Message
	for i := range b.slots {
		if v := b.slots[i].verdict; v == Ran || v == Duplicate {
			done = append(done, b.slots[i].m)
		}
	}
	if len(done) == 0 {
		return nil
	}
	return e.ack.Ack(ctx, done)
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
