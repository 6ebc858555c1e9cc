package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/consumer"
	"github.com/twmb/franz-go/pkg/kgo"
)

// DeadLetter is what a Kafka dead-letter copy's idemkit headers say about it.
type DeadLetter struct {
	Key       consumer.Key
	Topic     string // the topic the record came from
	Partition int32
	Offset    int64
	// Kind is the machine-readable reason (PERMANENT, CONFLICT, EXHAUSTED,
	// UNDECODABLE, NO_KEY, ...) from the idemkit-kind header, or, from adapters that
	// do not write it, the idemkit-outcome header (ERROR, DUPLICATE).
	Kind     string
	Attempts int
	Error    string
}

// Dead-letter header names the Kafka adapter writes.
const (
	dlTopic     = "idemkit-original-topic"
	dlPartition = "idemkit-original-partition"
	dlOffset    = "idemkit-original-offset"
	dlKey       = "idemkit-key"
	dlAttempts  = "idemkit-attempts"
	dlKind      = "idemkit-kind"
	dlOutcome   = "idemkit-outcome"
	dlError     = "idemkit-error"
)

// ReadDeadLetter reads a Kafka dead-letter copy's idemkit headers. It is the one
// place that knows them; it fails when the copy does not name its source topic.
func ReadDeadLetter(h map[string]string) (DeadLetter, error) {
	d := DeadLetter{Key: consumer.Key(h[dlKey]), Topic: h[dlTopic], Kind: h[dlKind], Error: h[dlError]}
	if d.Topic == "" {
		return d, fmt.Errorf("no %s header: not an idemkit dead letter", dlTopic)
	}
	if d.Kind == "" {
		d.Kind = h[dlOutcome]
	}
	p, _ := strconv.ParseInt(h[dlPartition], 10, 32)
	d.Partition = int32(p)
	d.Offset, _ = strconv.ParseInt(h[dlOffset], 10, 64)
	d.Attempts, _ = strconv.Atoi(h[dlAttempts])
	return d, nil
}

// RedriveFilter selects the dead letters to redrive; empty fields select all.
type RedriveFilter struct {
	Kinds  []string       // dead-letter kinds, case-insensitive
	Keys   []consumer.Key // idempotency keys
	Since  time.Time      // dead-lettered at or after
	Before time.Time      // dead-lettered before
}

func (f RedriveFilter) keep(m Message, kind string, key consumer.Key) bool {
	if len(f.Kinds) > 0 && !slices.ContainsFunc(f.Kinds, func(k string) bool { return strings.EqualFold(k, kind) }) {
		return false
	}
	if len(f.Keys) > 0 && !slices.Contains(f.Keys, key) {
		return false
	}
	return (f.Since.IsZero() || !m.Time.Before(f.Since)) && (f.Before.IsZero() || m.Time.Before(f.Before))
}

// Redrive verdicts, per dead letter.
const (
	Redriven      Verdict = "REDRIVEN"     // republished to its source topic
	Done          Verdict = "ALREADY_DONE" // its key is completed since: not republished
	Filtered      Verdict = "FILTERED"     // not selected by the filter
	NotRerunnable Verdict = "NOT_RERUN"    // its key is failed and Rerun was not asked: republishing would only dead-letter it again
)

// RedriveOptions configure RedriveKafka.
type RedriveOptions struct {
	Filter RedriveFilter
	// Rerun makes each selected key that is failed in the store run once more (see
	// admin.Inspector.Rerun, recorded with Actor and Reason) before its copy is
	// republished. Without it, a failed key's copy is not republished (NOT_RERUN).
	Rerun         bool
	Actor, Reason string
	// Execute republishes; without it RedriveKafka only counts what it would do.
	Execute bool
	// MaxReplays is the loop guard: a copy whose idemkit-replay-count header reached
	// it is quarantined, not republished. 0: 5.
	MaxReplays int
	// Progress, when set, is called after each batch.
	Progress func(RedriveReport)
}

// RedriveReport counts what a redrive did (or would do).
type RedriveReport struct {
	Read   int             `json:"read"`
	Counts map[Verdict]int `json:"counts"`
	// Kinds counts the selected dead letters by kind.
	Kinds map[string]int `json:"kinds"`
}

// RedriveKafka moves dead-lettered Kafka records from src (a KafkaSource over the
// dead-letter topic) back to the topics they came from, produced with cl, with the
// record's key, value and own headers (the dead-letter headers dropped) and
// idemkit-replay-count raised by one. With Rerun, keys that failed for good are made
// to run once more first (only failed ones, at the fence the store holds, so a
// redrive done twice never reruns a key its first pass completed). A key completed
// since is not republished. A store on consumer.DefaultScope is refused before src
// is read, dry runs included (an error matching consumer.ErrDefaultScope and
// ErrConfig).
func RedriveKafka(ctx context.Context, store admin.Store, src Source, cl *kgo.Client, o RedriveOptions) (RedriveReport, error) {
	if cl == nil {
		return RedriveReport{Counts: map[Verdict]int{}, Kinds: map[string]int{}}, configError("nil Kafka client")
	}
	return redrive(ctx, store, src, o, func(r *redriver, msgs []Message) error {
		return r.kafkaBatch(ctx, cl, msgs)
	})
}

// redriver is one redrive: an Inspector over its store, its options with their
// defaults filled in, and its report.
type redriver struct {
	in  *admin.Inspector
	o   RedriveOptions
	rep RedriveReport
}

// redrive checks the store's scope and o, fills in o's defaults and reads src to
// its end, handing each batch to step.
func redrive(ctx context.Context, store admin.Store, src Source, o RedriveOptions,
	step func(r *redriver, msgs []Message) error) (RedriveReport, error) {
	rep := RedriveReport{Counts: map[Verdict]int{}, Kinds: map[string]int{}}
	if store == nil || src == nil {
		return rep, configError("nil store or source")
	}
	if err := checkScope(store.Settings()); err != nil {
		return rep, err
	}
	if o.MaxReplays == 0 {
		o.MaxReplays = 5
	}
	in, err := admin.New(store)
	if err != nil {
		return rep, err
	}
	if o.Rerun && o.Execute && (strings.TrimSpace(o.Actor) == "" || strings.TrimSpace(o.Reason) == "") {
		return rep, configError("a redrive with Rerun records who and why: give Actor and Reason")
	}
	r := &redriver{in: in, o: o, rep: rep}
	for {
		msgs, rerr := src.Read(ctx, 500)
		if err := step(r, msgs); err != nil {
			return r.rep, err
		}
		if o.Progress != nil {
			o.Progress(r.rep)
		}
		if errors.Is(rerr, io.EOF) {
			return r.rep, nil
		}
		if rerr != nil {
			return r.rep, rerr
		}
		if err := ctx.Err(); err != nil {
			return r.rep, err
		}
	}
}

// kafkaBatch republishes the selected dead letters of msgs with cl.
func (r *redriver) kafkaBatch(ctx context.Context, cl *kgo.Client, msgs []Message) error {
	var out []*kgo.Record
	for _, m := range msgs {
		r.rep.Read++
		d, err := ReadDeadLetter(m.Headers)
		raw, ok := m.Raw.(*kgo.Record)
		switch {
		case err != nil || !ok || d.Key == "":
			r.rep.Counts[Invalid]++
			continue
		case !r.o.Filter.keep(m, d.Kind, d.Key):
			r.rep.Counts[Filtered]++
			continue
		}
		republish, err := r.decide(ctx, m, d.Kind, d.Key)
		if err != nil {
			return err
		}
		if !republish {
			continue
		}
		rec := &kgo.Record{Topic: d.Topic, Key: raw.Key, Value: raw.Value}
		for _, h := range raw.Headers {
			if !strings.HasPrefix(h.Key, "idemkit-") {
				rec.Headers = append(rec.Headers, h)
			}
		}
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderReplayCount, Value: []byte(strconv.Itoa(replays(m) + 1))})
		out = append(out, rec)
	}
	if len(out) == 0 {
		return nil
	}
	if err := cl.ProduceSync(ctx, out...).FirstErr(); err != nil {
		return fmt.Errorf("replay: redrive: produce: %w", err)
	}
	return nil
}

// decide counts a selected dead letter and says whether to republish it: not when
// the loop guard stops it, its key is completed since, or it failed for good and
// Rerun was not asked. With Rerun (and Execute) a failed key is made to run once
// more first, at the fence the store holds.
func (r *redriver) decide(ctx context.Context, m Message, kind string, key consumer.Key) (bool, error) {
	r.rep.Kinds[kind]++
	if replays(m) >= r.o.MaxReplays {
		r.rep.Counts[Quarantine]++
		return false, nil
	}
	rec, err := r.in.Inspect(ctx, "", key)
	switch {
	case errors.Is(err, admin.ErrNotFound):
	case err != nil && !errors.Is(err, admin.ErrCorrupt):
		return false, err
	case rec.State == "completed":
		r.rep.Counts[Done]++
		return false, nil
	case rec.State == "failed" && !r.o.Rerun:
		r.rep.Counts[NotRerunnable]++
		return false, nil
	case rec.State == "failed" && r.o.Execute:
		_, err := r.in.Rerun(ctx, admin.Change{Key: key, Actor: r.o.Actor, Reason: r.o.Reason, Fence: rec.Fence})
		if err != nil && !errors.Is(err, admin.ErrFenceMoved) && !errors.Is(err, admin.ErrWrongState) {
			return false, err
		}
	}
	r.rep.Counts[Redriven]++
	return r.o.Execute, nil
}
