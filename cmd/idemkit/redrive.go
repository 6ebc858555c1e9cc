package main

import (
	"context"
	"fmt"
	"sort"
	"text/tabwriter"

	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/replay"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"
)

func (a *app) redriveCmd() *cobra.Command {
	var s sourceFlags
	var kinds, keys []string
	var rerun, execute bool
	var reason, actor string
	c := &cobra.Command{
		Use:   "redrive (--topic DLQ_TOPIC | --queue DLQ) [--rerun --reason TEXT] [--execute]",
		Short: "move dead-lettered Kafka records or RabbitMQ messages back to their source (a dry run unless --execute)",
		Long: `redrive reads a Kafka dead-letter topic and republishes each selected copy to the
topic it came from (the idemkit-original-topic header), with its key, value and
own headers, and idemkit-replay-count raised by one. With --queue it reads a
RabbitMQ dead-letter queue instead and publishes each selected copy straight to
the work queue it came from (x-idemkit-original-queue), with publisher confirms,
acking it off the dead-letter queue once the broker confirmed it; what is not
redriven stays there. A copy whose key is completed since is skipped. A key that
failed for good would only be dead-lettered again: --rerun makes it run once more
first (recorded with --reason and --actor, and only while it is still failed, so
redriving twice never reruns a completed key).

redrive changes records, so it needs the service's --scope [IDEMKIT_SCOPE] and
refuses the default scope "default", dry runs included (exit 2).`,
		Args: exactArgs(0, "no arguments (name the dead-letter topic with --topic or queue with --queue)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if (s.topic == "") == (s.queue == "") || s.jsonl != "" {
				return usagef("redrive reads a Kafka dead-letter topic or a RabbitMQ dead-letter queue: give --topic or --queue")
			}
			if rerun && execute && reason == "" {
				return usagef("redrive --rerun needs --reason: say why; it is recorded in each record's history")
			}
			store, err := a.writeStore(cmd.Context(), "redrive")
			if err != nil {
				return err
			}
			f := replay.RedriveFilter{Kinds: kinds}
			for _, k := range keys {
				f.Keys = append(f.Keys, consumer.Key(k))
			}
			o := replay.RedriveOptions{Filter: f, Rerun: rerun, Execute: execute, Actor: actor, Reason: reason, MaxReplays: s.maxReplays}
			var rep replay.RedriveReport
			if s.queue != "" {
				rep, err = a.redriveQueue(ctx, store, s.queue, o)
			} else {
				rep, err = a.redriveTopic(ctx, store, &s, o)
			}
			if a.json {
				if perr := a.printJSON(map[string]any{"execute": execute, "report": rep}); perr != nil && err == nil {
					err = perr
				}
			} else {
				fmt.Fprintf(a.out, "redrive of %s: %d dead letters read\n", s.topic+s.queue, rep.Read)
				tw := tabwriter.NewWriter(a.out, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "VERDICT\tDEAD LETTERS")
				for _, v := range []replay.Verdict{replay.Redriven, replay.Done, replay.NotRerunnable, replay.Filtered, replay.Quarantine, replay.Invalid} {
					fmt.Fprintf(tw, "%s\t%d\n", v, rep.Counts[v])
				}
				kinds := make([]string, 0, len(rep.Kinds))
				for k := range rep.Kinds {
					kinds = append(kinds, k)
				}
				sort.Strings(kinds)
				for _, k := range kinds {
					fmt.Fprintf(tw, "kind %s\t%d\n", orDash(k), rep.Kinds[k])
				}
				_ = tw.Flush()
				if !execute {
					fmt.Fprintln(a.out, "dry run: nothing was republished; add --execute")
				}
			}
			return a.storeErr(err)
		},
	}
	s.add(c)
	f := c.Flags()
	f.StringSliceVar(&kinds, "kind", nil, "only dead letters of these kinds (PERMANENT, CONFLICT, EXHAUSTED, ... or ERROR from older adapters)")
	f.StringSliceVar(&keys, "key", nil, "only dead letters of these keys")
	f.BoolVar(&rerun, "rerun", false, "make keys that failed for good run once more before republishing them")
	f.BoolVar(&execute, "execute", false, "republish (without it, only count)")
	f.StringVar(&reason, "reason", "", "why (required with --rerun --execute; recorded in each record)")
	f.StringVar(&actor, "actor", env("USER", ""), "who (default $USER)")
	return c
}

// redriveTopic redrives a Kafka dead-letter topic.
func (a *app) redriveTopic(ctx context.Context, store admin.Store, s *sourceFlags, o replay.RedriveOptions) (replay.RedriveReport, error) {
	s.keyHeader = "idemkit-key"
	src, _, err := a.open(ctx, s, nil)
	if err != nil {
		return replay.RedriveReport{}, err
	}
	opts, err := a.kafkaOpts()
	if err != nil {
		return replay.RedriveReport{}, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return replay.RedriveReport{}, err
	}
	defer cl.Close()
	return replay.RedriveKafka(ctx, store, src, cl, o)
}

// redriveQueue redrives a RabbitMQ dead-letter queue.
func (a *app) redriveQueue(ctx context.Context, store admin.Store, queue string, o replay.RedriveOptions) (replay.RedriveReport, error) {
	conn, err := a.amqpConn()
	if err != nil {
		return replay.RedriveReport{}, err
	}
	src, err := replay.OpenRabbitMQ(conn, queue, replay.RabbitKeyHeader("x-idemkit-key"))
	if err != nil {
		return replay.RedriveReport{}, err
	}
	defer func() { _ = src.Close() }()
	return replay.RedriveRabbitMQ(ctx, store, src, conn, o)
}
