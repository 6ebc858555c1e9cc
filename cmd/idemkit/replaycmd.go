package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
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
	kopts := []replay.KafkaOpt{replay.KeyHeader(s.keyHeader)}
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
		Args:  exactArgs(0, "no arguments (name the source with --jsonl, --topic or --queue)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			plan, err := a.plan(cmd.Context(), &s)
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
			a.printPlan(plan)
			return nil
		},
	}
	s.add(c)
	c.Flags().StringVar(&out, "out", "", "also write the plan as JSON to this file")
	return c
}

func (a *app) plan(ctx context.Context, s *sourceFlags) (replay.PlanReport, error) {
	opts, err := s.options()
	if err != nil {
		return replay.PlanReport{}, err
	}
	store, err := a.readStore()
	if err != nil {
		return replay.PlanReport{}, err
	}
	src, _, err := a.open(ctx, s, nil)
	if err != nil {
		return replay.PlanReport{}, err
	}
	plan, err := replay.Plan(ctx, store, src, opts...)
	return plan, a.redisErr(err)
}

func (a *app) printPlan(p replay.PlanReport) {
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
}

func (a *app) replayCmd() *cobra.Command {
	var s sourceFlags
	var execute, accept bool
	var command, checkpoint, progress string
	var concurrency int
	var rate float64
	c := &cobra.Command{
		Use:   "replay (--jsonl FILE | --topic TOPIC | --queue QUEUE) --exec COMMAND [--execute]",
		Short: "drive old messages through a command, idempotently (a dry run that prints the plan unless --execute)",
		Long: `replay runs COMMAND (through sh -c) once per message whose key is not done:
the payload on its standard input, IDEMKIT_KEY, IDEMKIT_PARTITION and
IDEMKIT_OFFSET in its environment. Exit 0 completes the key (its standard output,
up to 64 KiB, is the stored result); exit 75 (EX_TEMPFAIL) is a retryable failure;
any other exit fails the key for good. Without --execute it only prints the plan.
A RabbitMQ queue (--queue) is consumed: what ran or was a duplicate is acked off
it, everything else stays; a plan returns every message to it.

replay changes records, so it needs the service's --scope [IDEMKIT_SCOPE] and
refuses the default scope "default", dry runs included (exit 2).`,
		Args: exactArgs(0, "no arguments (name the source with --jsonl, --topic or --queue)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if command == "" {
				return usagef("replay needs --exec COMMAND: what to run for each message")
			}
			if concurrency < 1 || rate < 0 {
				return usagef("--concurrency takes at least 1, --rate 0 (unlimited) or more")
			}
			store, err := a.writeStore("replay")
			if err != nil {
				return err
			}
			if !execute {
				plan, err := a.plan(ctx, &s)
				if err != nil {
					return err
				}
				if a.json {
					return a.printJSON(map[string]any{"dry_run": true, "plan": plan})
				}
				a.printPlan(plan)
				fmt.Fprintf(a.out, "dry run: nothing was run; add --execute to run the %d NEW and %d RETRY messages\n",
					plan.Counts[replay.New], plan.Counts[replay.Retry])
				return nil
			}
			opts, err := s.options()
			if err != nil {
				return err
			}
			var resume *replay.Checkpoint
			if checkpoint != "" && s.queue != "" {
				return usagef("--checkpoint with --queue: a queue keeps its own place (what is done is acked off it); drop --checkpoint")
			}
			if checkpoint != "" {
				cp, err := replay.FileCheckpoint(checkpoint).Load()
				if err != nil {
					return usageError{err}
				}
				resume = &cp
				opts = append(opts, replay.WithCheckpoint(replay.FileCheckpoint(checkpoint)))
			}
			src, total, err := a.open(ctx, &s, resume)
			if err != nil {
				return err
			}
			report, err := a.progress(progress, total)
			if err != nil {
				return err
			}
			opts = append(opts, replay.WithConcurrency(concurrency), replay.WithRate(rate), replay.WithAcceptBeyondRetention(accept),
				replay.WithProgress(report))
			rep, err := replay.Execute(ctx, store, src, execHandler(command), opts...)
			if a.json {
				if perr := a.printJSON(rep); perr != nil && err == nil {
					err = perr
				}
			} else {
				a.printReport(rep)
			}
			if err != nil {
				return a.redisErr(err)
			}
			if n := rep.Counts[replay.Error] + rep.Counts[replay.InProgress]; n > 0 {
				return unsettledError{n}
			}
			return nil
		},
	}
	s.add(c)
	f := c.Flags()
	f.StringVar(&command, "exec", "", "command run for each message (sh -c), payload on stdin")
	f.BoolVar(&execute, "execute", false, "run the messages (without it, only the plan is printed)")
	f.StringVar(&checkpoint, "checkpoint", "", "file to resume from and save progress to (written only after effects)")
	f.IntVar(&concurrency, "concurrency", 8, "commands run at once")
	f.Float64Var(&rate, "rate", 0, "at most this many messages per second (0: unlimited)")
	f.BoolVar(&accept, "accept-beyond-retention", false, "run messages older than --retention that have no record (they may have run before)")
	f.StringVar(&progress, "progress", "auto", "progress: auto (a bar on a terminal), bar, json (JSON lines on stderr) or none")
	return c
}

func (a *app) printReport(r replay.Report) {
	fmt.Fprintf(a.out, "replay of %s: %d messages read, %d skipped (before the checkpoint), %s, %.0f msgs/s\n",
		r.Source, r.Read, r.Skipped, r.Elapsed.Truncate(time.Millisecond), r.Rate)
	tw := tabwriter.NewWriter(a.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VERDICT\tMESSAGES")
	vs := []replay.Verdict{replay.Ran}
	vs = append(vs, replay.Verdicts...)
	for _, v := range vs {
		if v != replay.New && v != replay.Retry {
			fmt.Fprintf(tw, "%s\t%d\n", v, r.Counts[v])
		}
	}
	_ = tw.Flush()
	for _, e := range r.Errors {
		fmt.Fprintf(a.out, "not settled: %s (%s@%d): %s %s\n", e.Key, e.Partition, e.Offset, e.Verdict, oneLine(e.Err, 200))
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

// execHandler runs command once per message.
func execHandler(command string) replay.Handler[string] {
	return func(ctx context.Context, m replay.Message) (string, error) {
		cmd := exec.CommandContext(ctx, "sh", "-c", command)
		cmd.Stdin = bytes.NewReader(m.Payload)
		cmd.Env = append(os.Environ(), "IDEMKIT_KEY="+string(m.Key), "IDEMKIT_PARTITION="+m.Partition,
			"IDEMKIT_OFFSET="+strconv.FormatInt(m.Offset, 10))
		var stdout, stderr limited
		stdout.max, stderr.max = 64<<10, 4<<10
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return stdout.String(), nil
		case errors.As(err, &ee) && ee.ExitCode() == 75:
			return "", fmt.Errorf("%s: exit 75 (retry later): %s", command, strings.TrimSpace(stderr.String()))
		case errors.As(err, &ee) && ee.ExitCode() > 0:
			return "", consumer.Permanent(fmt.Errorf("%s: exit %d: %s", command, ee.ExitCode(), strings.TrimSpace(stderr.String())))
		}
		return "", fmt.Errorf("%s: %w", command, err)
	}
}

// limited keeps the first max bytes written to it.
type limited struct {
	bytes.Buffer
	max int
}

func (l *limited) Write(p []byte) (int, error) {
	if room := l.max - l.Len(); room > 0 {
		l.Buffer.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

var _ io.Writer = (*limited)(nil)
