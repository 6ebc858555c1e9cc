package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/replay"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// sourceFlags select what a plan or replay reads.
type sourceFlags struct {
	jsonl      string
	topic      string
	queue      string
	partitions []int
	fromOffset int64
	toOffset   int64
	fromTime   string
	toTime     string
	keyHeader  string
	canonical  string
	batch      int
	maxReplays int

	cmd *cobra.Command
}

// keyHeaderGiven reports whether --key-header was on the command line.
func (s *sourceFlags) keyHeaderGiven() bool {
	return s.cmd != nil && s.cmd.Flags().Changed("key-header")
}

func (s *sourceFlags) add(c *cobra.Command) {
	s.cmd = c
	f := c.Flags()
	f.StringVar(&s.jsonl, "jsonl", "", "read a JSON Lines file: {\"key\":..., \"payload\":..., \"time\":..., \"headers\":{...}} a line")
	f.StringVar(&s.topic, "topic", "", "read a Kafka topic (see --kafka-brokers)")
	f.StringVar(&s.queue, "queue", "", "read the messages a RabbitMQ queue holds now (see --amqp-url); keys from the MessageId property unless --key-header is given")
	f.IntSliceVar(&s.partitions, "partitions", nil, "Kafka partitions to read (default every partition)")
	f.Int64Var(&s.fromOffset, "from-offset", -1, "first offset to read in each partition (default the log start)")
	f.Int64Var(&s.toOffset, "to-offset", -1, "offset to stop before in each partition (default the end when the command starts)")
	f.StringVar(&s.fromTime, "from-time", "", "first record produced at or after this time (RFC 3339) in each partition")
	f.StringVar(&s.toTime, "to-time", "", "stop before the first record produced at or after this time (RFC 3339)")
	f.StringVar(&s.keyHeader, "key-header", "Idempotency-Key", "header that holds the idempotency key, as the consumer reads it (Kafka; RabbitMQ only when given)")
	f.StringVar(&s.canonical, "canonical", "none", "bytes to fingerprint: none (the payload as stored) or compact-json (whitespace removed)")
	f.IntVar(&s.batch, "batch-size", 500, "messages read, planned and run together")
	f.IntVar(&s.maxReplays, "max-replays", 5, "quarantine messages whose idemkit-replay-count header reached this (0: off)")
}

func parseTime(flag, v string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return t, usagef("--%s %q: give an RFC 3339 time such as 2026-11-20T08:00:00Z", flag, v)
	}
	return t, nil
}

// open opens the source the flags name; resume is the checkpoint to start after.
func (a *app) open(ctx context.Context, s *sourceFlags, resume *replay.Checkpoint) (replay.Source, int64, error) {
	given := 0
	for _, v := range []string{s.jsonl, s.topic, s.queue} {
		if v != "" {
			given++
		}
	}
	switch {
	case given > 1:
		return nil, 0, usagef("--jsonl, --topic and --queue: give one source")
	case s.queue != "":
		return a.openQueue(s)
	case s.jsonl != "":
		src, err := replay.OpenJSONL(s.jsonl)
		if err != nil {
			return nil, 0, usageError{err}
		}
		return src, -1, nil
	case s.topic == "":
		return nil, 0, usagef("no source: give --jsonl FILE, --topic TOPIC or --queue QUEUE")
	}
	r := replay.KafkaRange{Topic: s.topic}
	for _, p := range s.partitions {
		r.Partitions = append(r.Partitions, int32(p))
	}
	switch {
	case s.fromOffset >= 0 && s.fromTime != "":
		return nil, 0, usagef("--from-offset and --from-time: give one")
	case s.fromOffset >= 0:
		r.From = replay.AtOffset(s.fromOffset)
	case s.fromTime != "":
		t, err := parseTime("from-time", s.fromTime)
		if err != nil {
			return nil, 0, err
		}
		r.From = replay.AtTime(t)
	}
	switch {
	case s.toOffset >= 0 && s.toTime != "":
		return nil, 0, usagef("--to-offset and --to-time: give one")
	case s.toOffset >= 0:
		r.To = replay.AtOffset(s.toOffset)
	case s.toTime != "":
		t, err := parseTime("to-time", s.toTime)
		if err != nil {
			return nil, 0, err
		}
		r.To = replay.AtTime(t)
	}
	opts, err := a.kafkaOpts()
	if err != nil {
		return nil, 0, err
	}
	kopts := []replay.KafkaOption{replay.KeyHeader(s.keyHeader)}
	if resume != nil {
		kopts = append(kopts, replay.ResumeFrom(*resume))
	}
	octx, cancel := context.WithTimeout(ctx, 2*a.timeout)
	defer cancel()
	src, err := replay.OpenKafka(octx, opts, r, kopts...)
	if err != nil {
		if octx.Err() != nil {
			err = octx.Err()
		}
		if exitCode(err) == exitUnreachable {
			return nil, 0, fmt.Errorf("the Kafka brokers at %s did not answer (check --kafka-brokers, TLS and SASL): %w", a.kafkaBrokers, err)
		}
		return nil, 0, err
	}
	a.closers = append(a.closers, func() { _ = src.Close() })
	return src, src.Total(), nil
}

func (s *sourceFlags) options() ([]replay.Option, error) {
	opts := []replay.Option{replay.WithBatchSize(s.batch), replay.WithMaxReplays(s.maxReplays)}
	switch s.canonical {
	case "none", "":
	case "compact-json":
		opts = append(opts, replay.WithCanonical(replay.CompactJSON))
	default:
		return nil, usagef("--canonical %q: give none or compact-json", s.canonical)
	}
	return opts, nil
}

func (a *app) planCmd() *cobra.Command {
	var s sourceFlags
	var out string
	c := &cobra.Command{
		Use:   "plan (--jsonl FILE | --topic TOPIC | --queue QUEUE)",
		Short: "say what a replay would do, read-only: NEW / RETRY / DUPLICATE / FAILED / IN_PROGRESS / CONFLICT counts",
		Long: `plan reads the source and the records of its keys, changing nothing, and counts
what a replay would do with each message; it names the INVALID messages (a
file's line number, or a topic's partition and offset) and why. It reads the
scope --scope names, or "default" when none is given, and says which. It exits 0
once the plan is made, whatever the plan finds.`,
		Args: exactArgs(0, "no arguments (name the source with --jsonl, --topic or --queue)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := a.readStore(cmd.Context())
			if err != nil {
				return err
			}
			plan, err := a.plan(cmd.Context(), &s, store)
			if err != nil {
				return err
			}
			if out != "" {
				b, _ := json.MarshalIndent(plan, "", "  ")
				if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
					return err
				}
			}
			if a.json {
				return a.printJSON(plan)
			}
			a.printPlan(plan, &s)
			return nil
		},
	}
	s.add(c)
	c.Flags().StringVar(&out, "out", "", "also write the plan as JSON to this file")
	return c
}

func (a *app) plan(ctx context.Context, s *sourceFlags, store consumer.Store) (replay.PlanReport, error) {
	opts, err := s.options()
	if err != nil {
		return replay.PlanReport{}, err
	}
	src, _, err := a.open(ctx, s, nil)
	if err != nil {
		return replay.PlanReport{}, err
	}
	plan, err := replay.Plan(ctx, store, src, opts...)
	return plan, a.storeErr(err)
}

func (a *app) printPlan(p replay.PlanReport, s *sourceFlags) {
	fmt.Fprintf(a.out, "plan of %s in scope %q: %d messages\n", p.Source, p.Scope, p.Messages)
	if a.scope == "" {
		fmt.Fprintf(a.out, "(%s)\n", noScope)
	}
	tw := tabwriter.NewWriter(a.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VERDICT\tMESSAGES\tEXAMPLE KEYS")
	for _, v := range replay.Verdicts {
		if v == replay.Error {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\n", v, p.Counts[v], strings.Join(p.Examples[v], " "))
	}
	_ = tw.Flush()
	if p.BeyondRetention > 0 {
		fmt.Fprintf(a.out, "WARNING: %d messages are older than the %v retention; %d of them have no record and would run again if they ran before (replay refuses them without --accept-beyond-retention)\n",
			p.BeyondRetention, p.Retention, p.BeyondRetentionNew)
	}
	if p.Counts[replay.Conflict] > 0 {
		fmt.Fprintln(a.out, "CONFLICT: the stored copies differ from the payloads the service fingerprinted; if they were only re-encoded, try --canonical compact-json")
	}
	if n := p.Counts[replay.Invalid]; n > 0 {
		fmt.Fprintf(a.out, "%d messages are INVALID and will not run:\n", n)
		a.printItems(p.Invalid, n, s)
	}
}

// printItems names the messages items lists, of n in all.
func (a *app) printItems(items []replay.ItemError, n int, s *sourceFlags) {
	for _, e := range items {
		key := ""
		if e.Key != "" {
			key = oneLine(e.Key, 80) + ": "
		}
		fmt.Fprintf(a.out, "  %s %s: %s%s\n", e.Verdict, s.where(e.Partition, e.Offset), key, oneLine(e.Err, 200))
	}
	if n > len(items) {
		fmt.Fprintf(a.out, "  ... and %d more (the first %d are named)\n", n-len(items), len(items))
	}
}

// where names a message's place in the source: a file's line, or a partition
// (a topic's, or the queue) and offset.
func (s *sourceFlags) where(partition string, offset int64) string {
	if s.jsonl != "" {
		return fmt.Sprintf("line %d", offset)
	}
	return fmt.Sprintf("%s@%d", orDash(partition), offset)
}

// replayRun is one replay command: its flags.
type replayRun struct {
	s                   sourceFlags
	execute, accept     bool
	command, checkpoint string
	progress            string
	concurrency         int
	rate                float64
}

func (a *app) replayCmd() *cobra.Command {
	var r replayRun
	c := &cobra.Command{
		Use:   "replay (--jsonl FILE | --topic TOPIC | --queue QUEUE) --exec COMMAND [--execute]",
		Short: "drive old messages through a command, idempotently (a dry run that prints the plan unless --execute)",
		Long: `replay runs COMMAND (through sh -c) once per message whose key is not done:
the payload on its standard input, IDEMKIT_KEY, IDEMKIT_PARTITION and
IDEMKIT_OFFSET in its environment. Exit 0 completes the key (its standard output,
up to 64 KiB, is the stored result); exit 75 (EX_TEMPFAIL) is a retryable failure;
any other exit fails the key for good. Without --execute it only prints the plan
(and exits 0 once it is made). A RabbitMQ queue (--queue) is consumed: what ran or
was a duplicate is acked off it, everything else stays; a plan returns every
message to it.

replay changes records, so it needs the service's --scope [IDEMKIT_SCOPE] and
refuses the default scope "default", dry runs included (exit 2).

The report counts each verdict and names the first 20 messages that did not end
RAN or DUPLICATE (a file's line number, or a partition and offset), and why.
SIGINT or SIGTERM stops the replay: each running command's process group gets
SIGTERM, and SIGKILL for whatever is left once the command has exited or 5 s
have passed; its message is given back without counting an attempt, and the
checkpoint is saved.

A replay that stops before the end of its source exits with why it stopped (2, 4,
5 or 8), whatever it counted; one that reached the end exits 7 if any message
ended as code 7 says, else 6 if any ended as code 6 says, else 0.

` + exitCodeHelp(),
		Args: exactArgs(0, "no arguments (name the source with --jsonl, --topic or --queue)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if r.command == "" {
				return usagef("replay needs --exec COMMAND: what to run for each message")
			}
			if r.concurrency < 1 || r.rate < 0 {
				return usagef("--concurrency takes at least 1, --rate 0 (unlimited) or more")
			}
			store, err := a.writeStore(cmd.Context(), "replay")
			if err != nil {
				return err
			}
			if !r.execute {
				return a.dryRun(cmd.Context(), &r.s, store)
			}
			return a.runReplay(cmd.Context(), &r, store)
		},
	}
	r.s.add(c)
	f := c.Flags()
	f.StringVar(&r.command, "exec", "", "command run for each message (sh -c), payload on stdin")
	f.BoolVar(&r.execute, "execute", false, "run the messages (without it, only the plan is printed)")
	f.StringVar(&r.checkpoint, "checkpoint", "", "file to resume from and save progress to (written only after effects)")
	f.IntVar(&r.concurrency, "concurrency", 8, "commands run at once")
	f.Float64Var(&r.rate, "rate", 0, "at most this many messages per second (0: unlimited)")
	f.BoolVar(&r.accept, "accept-beyond-retention", false, "run messages older than --retention that have no record (they may have run before)")
	f.StringVar(&r.progress, "progress", "auto", "progress: auto (a bar on a terminal), bar, json (JSON lines on stderr) or none")
	return c
}

// dryRun prints what a replay would do.
func (a *app) dryRun(ctx context.Context, s *sourceFlags, store consumer.Store) error {
	plan, err := a.plan(ctx, s, store)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(map[string]any{"dry_run": true, "plan": plan})
	}
	a.printPlan(plan, s)
	fmt.Fprintf(a.out, "dry run: nothing was run; add --execute to run the %d NEW and %d RETRY messages\n",
		plan.Counts[replay.Unseen], plan.Counts[replay.Retry])
	return nil
}

// runReplay executes the replay r describes, prints its report, and returns
// the error its exit code comes from.
func (a *app) runReplay(ctx context.Context, r *replayRun, store consumer.Store) error {
	opts, resume, err := r.options()
	if err != nil {
		return err
	}
	src, total, err := a.open(ctx, &r.s, resume)
	if err != nil {
		return err
	}
	report, err := a.progress(r.progress, total)
	if err != nil {
		return err
	}
	rep, err := replay.Execute(ctx, store, src, execHandler(r.command), append(opts, replay.WithProgress(report))...)
	if a.json {
		if perr := a.printJSON(rep); perr != nil && err == nil {
			err = perr
		}
	} else {
		a.printReport(rep, &r.s, err == nil)
	}
	switch {
	case err != nil && ctx.Err() != nil:
		return r.interrupted(err)
	case err != nil:
		return a.storeErr(err)
	}
	return replayExit(rep.Counts)
}

// options are the replay's options but progress, and the checkpoint it resumes
// from (nil: none).
func (r *replayRun) options() ([]replay.Option, *replay.Checkpoint, error) {
	opts, err := r.s.options()
	if err != nil {
		return nil, nil, err
	}
	opts = append(opts, replay.WithConcurrency(r.concurrency), replay.WithRate(r.rate), replay.WithAcceptBeyondRetention(r.accept))
	switch {
	case r.checkpoint == "":
		return opts, nil, nil
	case r.s.queue != "":
		return nil, nil, usagef("--checkpoint with --queue: a queue keeps its own place (what is done is acked off it); drop --checkpoint")
	}
	cp, err := replay.FileCheckpoint(r.checkpoint).Load()
	if err != nil {
		return nil, nil, usageError{err}
	}
	return append(opts, replay.WithCheckpoint(replay.FileCheckpoint(r.checkpoint))), &cp, nil
}

// interrupted is the error of a replay a signal stopped.
func (r *replayRun) interrupted(err error) error {
	hint := "; the replay stopped after its running commands"
	if r.checkpoint != "" {
		hint += " and saved its checkpoint in " + r.checkpoint
	}
	return interruptedError{err: err, hint: hint + ": run it again to resume (what ran is recorded, and is a DUPLICATE the next time)"}
}

// printReport prints what a replay did; finished says it reached the end of its
// source.
func (a *app) printReport(r replay.Report, s *sourceFlags, finished bool) {
	fmt.Fprintf(a.out, "replay of %s: %d messages read, %d skipped (before the checkpoint), %s, %.0f msgs/s\n",
		r.Source, r.Read, r.Skipped, r.Elapsed.Truncate(time.Millisecond), r.Rate)
	tw := tabwriter.NewWriter(a.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VERDICT\tMESSAGES")
	vs := []replay.Verdict{replay.Ran}
	vs = append(vs, replay.Verdicts...)
	for _, v := range vs {
		if v != replay.Unseen && v != replay.Retry {
			fmt.Fprintf(tw, "%s\t%d\n", v, r.Counts[v])
		}
	}
	_ = tw.Flush()
	n := 0
	for v, c := range r.Counts {
		if v != replay.Ran && v != replay.Duplicate {
			n += c
		}
	}
	switch {
	case n > 0:
		fmt.Fprintf(a.out, "%d messages did not end RAN or DUPLICATE:\n", n)
		a.printItems(r.Errors, n, s)
	case finished:
		fmt.Fprintf(a.out, "every message settled: %d RAN, %d DUPLICATE\n", r.Counts[replay.Ran], r.Counts[replay.Duplicate])
	}
	parts := make([]string, 0, len(r.Checkpoint.Next))
	for p, o := range r.Checkpoint.Next {
		parts = append(parts, fmt.Sprintf("%s=%d", orDash(p), o))
	}
	sort.Strings(parts)
	fmt.Fprintf(a.out, "checkpoint (next offset per partition): %s\n", strings.Join(parts, " "))
}

// progress returns the WithProgress callback the --progress flag asks for.
func (a *app) progress(mode string, total int64) (func(replay.Progress), error) {
	if mode == "auto" {
		mode = "none"
		if f, ok := a.errOut.(*os.File); ok && term.IsTerminal(int(f.Fd())) && !a.json {
			mode = "bar"
		}
	}
	switch mode {
	case "none":
		return func(replay.Progress) {}, nil
	case "json":
		enc := json.NewEncoder(a.errOut)
		return func(p replay.Progress) { _ = enc.Encode(p) }, nil
	case "bar":
		bar := progressbar.NewOptions64(total, progressbar.OptionSetWriter(a.errOut), progressbar.OptionSetDescription("replay"),
			progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("msgs"),
			progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
		return func(p replay.Progress) {
			_ = bar.Set(p.Read)
			if p.Final {
				_ = bar.Finish()
			}
		}, nil
	}
	return nil, usagef("--progress %q: give auto, bar, json or none", mode)
}
