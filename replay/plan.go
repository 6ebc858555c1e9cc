package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/store/memory"
	redisstore "github.com/idemkit/idemkit/store/redis"
)

// Verdict is what a plan expects a message's execution to do, or what it did.
type Verdict string

// Verdicts.
const (
	Unseen     Verdict = "NEW"         // no record (or a forgotten one): the handler runs; written NEW in plans
	Retry      Verdict = "RETRY"       // a retryable failure was recorded: the handler runs again
	Duplicate  Verdict = "DUPLICATE"   // completed: not run
	Failed     Verdict = "FAILED"      // failed for good: not run (its dead letter stands)
	InProgress Verdict = "IN_PROGRESS" // another owner holds the claim
	Conflict   Verdict = "CONFLICT"    // the record's fingerprint differs: see WithCanonical
	Corrupt    Verdict = "CORRUPT"     // the key holds something that is not a record
	Invalid    Verdict = "INVALID"     // no usable key
	Quarantine Verdict = "QUARANTINE"  // stopped by the loop guard
	Error      Verdict = "ERROR"       // execution only: a retryable error; the checkpoint stays before it
)

// Verdicts lists every verdict in a stable order, for tables.
var Verdicts = []Verdict{Unseen, Retry, Duplicate, Failed, InProgress, Conflict, Corrupt, Invalid, Quarantine, Error}

// PlanReport is what a replay would do.
type PlanReport struct {
	Source   string          `json:"source"`
	Scope    string          `json:"scope"`
	Messages int             `json:"messages"`
	Counts   map[Verdict]int `json:"counts"`
	// Examples are up to five keys per verdict (of INVALID messages, only the
	// usable keys of those invalid for another reason).
	Examples map[Verdict][]string `json:"examples,omitempty"`
	// Invalid names the first 20 INVALID messages: where each is (Partition and
	// Offset: a JSONL file's "" and line number, a Kafka record's topic/partition
	// and offset) and why (Err). Counts[Invalid] counts them all.
	Invalid []ItemError `json:"invalid,omitempty"`
	// Retention is the store's; BeyondRetention counts messages older than it, and
	// BeyondRetentionNew those of them with no record: they may have run before their
	// record expired, and would run again (Execute refuses them unless told).
	Retention          time.Duration `json:"retention_ns"`
	BeyondRetention    int           `json:"beyond_retention"`
	BeyondRetentionNew int           `json:"beyond_retention_new"`
	Oldest             time.Time     `json:"oldest,omitzero"`
	Newest             time.Time     `json:"newest,omitzero"`
	Elapsed            time.Duration `json:"elapsed_ns"`
}

// Peeker reads many records in one round trip without changing them;
// redisstore.Store and memory.Store have it. Plan uses it when the store
// has it, and Store.Peek one key at a time otherwise.
type Peeker interface {
	PeekRecords(ctx context.Context, scope string, keys []consumer.Key) ([]consumer.AdminRecord, error)
}

var (
	_ Peeker = (*redisstore.Store)(nil)
	_ Peeker = (*memory.Store)(nil)
)

// Named is a Source that names what it reads (a topic range, a file) for reports
// and checkpoints.
type Named interface{ Name() string }

func sourceName(src Source) string {
	if n, ok := src.(Named); ok {
		return n.Name()
	}
	return fmt.Sprintf("%T", src)
}

// Plan reads src to its end and says what Execute would do with each message, by
// reading the records in batches (read-only: nothing is claimed or changed). A
// message whose key an earlier message of the range has is a DUPLICATE, as it
// would be when executed.
func Plan(ctx context.Context, store consumer.Store, src Source, opts ...Option) (PlanReport, error) {
	c, err := newConfig(opts)
	if err != nil {
		return PlanReport{}, err
	}
	if store == nil || src == nil {
		return PlanReport{}, configError("nil store or source")
	}
	s := store.Settings()
	start := c.now()
	rep := PlanReport{Source: sourceName(src), Scope: s.Scope, Counts: map[Verdict]int{}, Examples: map[Verdict][]string{},
		Retention: s.Retention}
	seen := make(map[consumer.Key]struct{})
	cutoff := start.Add(-s.Retention)
	for {
		msgs, rerr := src.Read(ctx, c.batch)
		if len(msgs) > 0 {
			verdicts, why, err := classify(ctx, store, s, &c, msgs)
			if err != nil {
				return rep, err
			}
			for i, m := range msgs {
				v := verdicts[i]
				if v == Invalid && len(rep.Invalid) < maxNamed {
					rep.Invalid = append(rep.Invalid, itemError(m, v, why[i]))
				}
				if v == Unseen || v == Retry || v == Duplicate || v == Failed || v == InProgress || v == Conflict {
					if _, dup := seen[m.Key]; dup {
						v = Duplicate
					}
					seen[m.Key] = struct{}{}
				}
				rep.add(v, m)
				if !m.Time.IsZero() {
					if rep.Oldest.IsZero() || m.Time.Before(rep.Oldest) {
						rep.Oldest = m.Time
					}
					if m.Time.After(rep.Newest) {
						rep.Newest = m.Time
					}
					if m.Time.Before(cutoff) {
						rep.BeyondRetention++
						if v == Unseen {
							rep.BeyondRetentionNew++
						}
					}
				}
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return rep, fmt.Errorf("replay: read %s: %w", rep.Source, rerr)
		}
		if err := ctx.Err(); err != nil {
			return rep, err
		}
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

func (r *PlanReport) add(v Verdict, m Message) {
	r.Messages++
	r.Counts[v]++
	if len(r.Examples[v]) < 5 && m.Key.Validate() == nil {
		r.Examples[v] = append(r.Examples[v], string(m.Key))
	}
}

// replays is m's replay count (its idemkit-replay-count header).
func replays(m Message) int {
	n, _ := strconv.Atoi(m.Headers[HeaderReplayCount])
	return n
}

// classify gives each message the verdict of its record, in one read, and says
// why of each INVALID one.
func classify(ctx context.Context, store consumer.Store, s consumer.Settings, c *config, msgs []Message) ([]Verdict, []string, error) {
	out := make([]Verdict, len(msgs))
	why := make([]string, len(msgs))
	var keys []consumer.Key
	var at []int
	for i, m := range msgs {
		if reason := invalid(m); reason != "" {
			out[i], why[i] = Invalid, reason
			continue
		}
		if c.maxReplays > 0 && replays(m) >= c.maxReplays {
			out[i] = Quarantine
			continue
		}
		keys, at = append(keys, m.Key), append(at, i)
	}
	recs, err := peek(ctx, store, keys)
	if err != nil {
		return nil, nil, err
	}
	for j, r := range recs {
		i := at[j]
		if r.Corrupt != "" {
			out[i] = Corrupt
			continue
		}
		if s.Fingerprint && !r.Fingerprint.IsZero() && r.State != "forgotten" {
			fp, err := c.fingerprint(msgs[i])
			if err != nil {
				out[i], why[i] = Invalid, "canonical form: "+err.Error()
				continue
			}
			if fp != r.Fingerprint {
				out[i] = Conflict
				continue
			}
		}
		out[i] = verdictOf(r.Record)
	}
	return out, why, nil
}

// invalid says why m cannot run (no usable key), or "" when it can.
func invalid(m Message) string {
	if m.KeyErr != nil {
		return m.KeyErr.Error()
	}
	if err := m.Key.Validate(); err != nil {
		return err.Error()
	}
	return ""
}

func verdictOf(r consumer.Record) Verdict {
	switch r.State {
	case "completed":
		return Duplicate
	case "failed":
		return Failed
	case "retry":
		return Retry
	case "started":
		if r.LeaseUntil.After(r.Now) {
			return InProgress
		}
		return Retry // its lease ran out: the next claim takes it over and runs it
	}
	return Unseen // none, or forgotten
}

func (c *config) payload(m Message) ([]byte, error) {
	if c.canonical == nil {
		return m.Payload, nil
	}
	return c.canonical(m)
}

func (c *config) fingerprint(m Message) (consumer.Fingerprint, error) {
	p, err := c.payload(m)
	if err != nil {
		return consumer.Fingerprint{}, err
	}
	return consumer.FingerprintOf(p), nil
}

// peek reads the records of keys in the store's scope.
func peek(ctx context.Context, store consumer.Store, keys []consumer.Key) ([]consumer.AdminRecord, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	if p, ok := store.(Peeker); ok {
		return p.PeekRecords(ctx, "", keys)
	}
	out := make([]consumer.AdminRecord, len(keys))
	for i, k := range keys {
		r, err := store.Peek(ctx, k)
		var cre *consumer.CorruptRecordError
		switch {
		case errors.As(err, &cre):
			out[i] = consumer.AdminRecord{Record: r, Corrupt: cre.Reason}
		case err != nil:
			return nil, err
		default:
			out[i] = consumer.AdminRecord{Record: r}
		}
	}
	return out, nil
}
